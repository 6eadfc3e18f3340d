// Stress driver: many random plans through the validator and the rewrite checks.
//   ISER_STRESS_PLANS=1000000 build/tests/iser_tests --gtest_filter='PlannerStress.*'
// (or shards: ISER_STRESS_SEED=k ISER_STRESS_PLANS=62500 ... for k = 1..16, in parallel).
// The default count keeps ctest short; docs/evaluation.md records the 1M-plan run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/planner/synthetic_counts.h"
#include "iser/metrics.h"
#include "iser/planner.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/validator.h"

namespace iser {
namespace {

// Shards of a long run use different seeds: ISER_STRESS_SEED (default 20261130).
uint64_t stress_seed() {
  const char* env = std::getenv("ISER_STRESS_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20261130;
}

int64_t stress_plans() {
  const char* env = std::getenv("ISER_STRESS_PLANS");
  return env != nullptr ? std::atoll(env) : 1000;
}

// Random P in 2..72, E = P·H <= 1024, S in 1..16, g_min in 1..6, skewed counts; every policy of
// the HALO-Q family (and iser), each over a short sequence of invocations so that resident sees
// previous plans. Returns the number of violations (printing the first few).
TEST(PlannerStress, RandomPlansHaveNoViolations) {
  const int64_t target = stress_plans();
  const std::vector<std::string> policies = {
      "halo-q", "owner-home", "absorb", "resident", "halo-q-owner-in", "iser", "iser-stateless"};
  testing::SplitMix64 rng(stress_seed());
  int64_t plans = 0;
  int64_t violations = 0;
  int64_t broadcasts = 0;
  while (plans < target) {
    const int P = 2 + static_cast<int>(rng.below(71));
    const int H = 1 + static_cast<int>(rng.below(1024 / P));
    const int S = 1 + static_cast<int>(rng.below(16));
    const int g_min = 1 + static_cast<int>(rng.below(6));
    const Topology topo = Topology::make(P, P * H, S, g_min);
    PolicyOptions po;
    po.min_move = rng.below(4) == 0 ? static_cast<int>(rng.below(300)) : 0;
    const std::string& name = policies[rng.below(static_cast<uint32_t>(policies.size()))];
    auto policy = make_policy(name, topo, po);
    const int max_count = static_cast<int>(1 + rng.below(4000));
    for (int it = 0; it < 4 && plans < target; ++it, ++plans) {
      const CountMatrix counts = testing::random_skewed_counts(P, P * H, max_count, rng.next());
      const PolicyResult result = policy->plan(counts);
      broadcasts += static_cast<int64_t>(result.plan.broadcasts.size());
      auto lines = validate_plan(topo, counts, result.plan, policy->validation());
      const auto loads = loads_from_flows(P, result.flows);
      for (int r = 0; r < P; ++r) {
        if (loads[r] != result.plan.loads[r]) lines.push_back("flow loads differ from plan loads");
      }
      int64_t routes = 0;
      for (const RouteFlow& f : result.flows) routes += f.routes;
      if (routes != counts.total()) lines.push_back("flows do not conserve routes");
      if (!lines.empty()) {
        if (violations < 5) {
          ADD_FAILURE() << name << " P=" << P << " E=" << P * H << " S=" << S << " g_min=" << g_min
                        << ": " << lines[0];
        }
        ++violations;
      }
    }
  }
  std::printf("stress: %lld plans, %lld broadcasts, %lld violations\n",
              static_cast<long long>(plans), static_cast<long long>(broadcasts),
              static_cast<long long>(violations));
  EXPECT_EQ(violations, 0);
}

}  // namespace
}  // namespace iser
