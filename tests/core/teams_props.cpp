// Property tests of LSA teams (rapidcheck): the default (one team of P) plans exactly as a
// topology without lsa_size, and with several teams every policy's plan validates and the
// team-aware policies never let a broadcast's hosts span two teams.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "core/planner/synthetic_counts.h"
#include "iser/policy.h"
#include "iser/validator.h"
#include "teams_test_util.h"

namespace iser {
namespace {

// Random P in 2..72, E a multiple of P up to 512, S in 1..8, g_min in 1..6.
Topology gen_topology(int num_ranks) {
  const int H = *rc::gen::inRange(1, 512 / num_ranks + 1);
  const int S = *rc::gen::inRange(1, 9);
  const int g_min = *rc::gen::inRange(1, 7);
  return Topology::make(num_ranks, num_ranks * H, S, g_min);
}

RC_GTEST_PROP(TeamsProps, OneTeamPlansAsWithoutLsaSize, ()) {
  const Topology plain = gen_topology(*rc::gen::inRange(2, 73));
  const Topology one_team = Topology::make(plain.num_ranks, plain.num_experts, plain.num_slots,
                                           plain.g_min, plain.num_ranks);
  RC_ASSERT(one_team.num_teams() == 1);
  RC_ASSERT(one_team.group_sizes() == plain.group_sizes());
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const int max_count = *rc::gen::element(1, 5, 100, 3000);
  for (const std::string& name : test_util::team_policies()) {
    const auto a = make_policy(name, plain, {});
    const auto b = make_policy(name, one_team, {});
    // Three invocations, so that resident and windowed state is compared too.
    for (int i = 0; i < 3; ++i) {
      const CountMatrix counts = testing::random_skewed_counts(
          plain.num_ranks, plain.num_experts, max_count, seed + static_cast<uint64_t>(i));
      const PolicyResult ra = a->plan(counts);
      const PolicyResult rb = b->plan(counts);
      RC_ASSERT(ra.plan == rb.plan);
      RC_ASSERT(ra.flows == rb.flows);
    }
  }
}

RC_GTEST_PROP(TeamsProps, PlansStayInsideTeams, ()) {
  const int lsa_size = *rc::gen::element(1, 2, 3, 4, 6, 8, 12, 16);
  const int num_teams = *rc::gen::inRange(2, 72 / lsa_size + 1);
  const Topology plain = gen_topology(lsa_size * num_teams);
  const Topology topo =
      Topology::make(plain.num_ranks, plain.num_experts, plain.num_slots, plain.g_min, lsa_size);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const int max_count = *rc::gen::element(1, 5, 100, 3000);
  for (const std::string& name : test_util::team_policies()) {
    const auto policy = make_policy(name, topo, {});
    for (int i = 0; i < 2; ++i) {
      const CountMatrix counts = testing::random_skewed_counts(
          topo.num_ranks, topo.num_experts, max_count, seed + static_cast<uint64_t>(i));
      const PolicyResult result = policy->plan(counts);
      const std::string failure = test_util::team_plan_failure(topo, counts, *policy, result);
      RC_ASSERT(failure == "");
    }
  }
}

}  // namespace
}  // namespace iser
