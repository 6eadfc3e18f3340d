// Property tests of the HALO-Q family and the route rewrite (rapidcheck): every plan validates,
// the rewrite conserves routes, flow loads equal plan loads, and token and flow rewrites agree;
// iser's chain leveling keeps routes and never raises the max load, nor do its breadth-first
// candidates (also on the skew families, where they win most often).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

#include "core/planner/placement_common.h"
#include "core/planner/synthetic_counts.h"
#include "core/trace/synthetic_families.h"
#include "iser/metrics.h"
#include "iser/planner.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/trace.h"
#include "iser/validator.h"
#include "planner_test_util.h"

namespace iser {
namespace {

struct Case {
  Topology topo;
  CountMatrix counts;
};

// Random P in 2..72, E a multiple of P up to 1024, S in 1..16, g_min in 1..6, skewed counts.
rc::Gen<Case> gen_case() {
  return rc::gen::exec([] {
    const int P = *rc::gen::inRange(2, 73);
    const int max_h = 1024 / P;
    const int H = *rc::gen::inRange(1, max_h + 1);
    const int S = *rc::gen::inRange(1, 17);
    const int g_min = *rc::gen::inRange(1, 7);
    const int max_count = *rc::gen::element(0, 1, 5, 100, 3000);
    const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
    const Topology topo = Topology::make(P, P * H, S, g_min);
    return Case{topo, testing::random_skewed_counts(P, P * H, max_count, seed)};
  });
}

void check_rewrite(const Case& c, const Plan& plan) {
  const auto flows = rewrite_flows(c.topo, c.counts, plan);
  // Conservation: every (source, expert) sends exactly its routes.
  CountMatrix sent(c.topo.num_ranks, c.topo.num_experts);
  for (const RouteFlow& f : flows) {
    RC_ASSERT(f.routes > 0);
    sent.at(f.src_rank, f.expert) += f.routes;
  }
  RC_ASSERT(sent == c.counts);
  const auto loads = loads_from_flows(c.topo.num_ranks, flows);
  for (int r = 0; r < c.topo.num_ranks; ++r) RC_ASSERT(loads[r] == plan.loads[r]);
  // Per (expert, destination) flow totals equal the quotas, summed over the expert's broadcasts.
  std::map<std::pair<int, int>, int64_t> quota;
  std::map<std::pair<int, int>, int64_t> to;
  for (const Broadcast& b : plan.broadcasts) {
    for (int r = 0; r < c.topo.num_ranks; ++r) quota[{b.expert, r}] += b.quota[r];
  }
  for (const RouteFlow& f : flows) {
    if (quota.count({f.expert, 0}) != 0) to[{f.expert, f.dst_rank}] += f.routes;
  }
  for (const auto& [key, q] : quota) {
    const auto it = to.find(key);
    RC_ASSERT((it == to.end() ? 0 : it->second) == q);
  }
}

// A skew-family invocation (docs/evaluation.md): a random family and seed, E = 256, top-8, P in
// {8, 16, 32, 64}, S in 1..4, layer 0-1, iteration 0-2, 512 or 2,048 tokens per rank.
rc::Gen<Case> gen_skew_case() {
  return rc::gen::exec([] {
    SyntheticOptions o;
    o.kind = *rc::gen::elementOf(trace::skew_family_names());
    o.num_experts = 256;
    o.top_k = 8;
    o.num_layers = 2;
    o.seed = *rc::gen::inRange<uint64_t>(1, 1000);
    const int P = *rc::gen::element(8, 16, 32, 64);
    const int S = *rc::gen::inRange(1, 5);
    return Case{Topology::make(P, 256, S),
                make_synthetic(o)->counts(*rc::gen::inRange(0, 2), *rc::gen::inRange(0, 3), P,
                                          *rc::gen::element(512, 2048))};
  });
}

// An iser plan validates: owner payloads <= S, an expert may have several (disjoint) groups.
void check_iser_plan_valid(const Case& c, const Plan& plan) {
  ValidationOptions v;
  v.max_exports_per_owner = c.topo.num_slots;
  v.unique_experts = false;
  const auto violations = validate_plan(c.topo, c.counts, plan, v);
  if (!violations.empty()) RC_FAIL(violations[0]);
}

int32_t max_load(const Plan& plan) {
  return *std::max_element(plan.loads.begin(), plan.loads.end());
}

RC_GTEST_PROP(PlannerProps, HaloQFamilyPlansValidateAndRewriteConserves, ()) {
  const Case c = *gen_case();
  HaloQOptions options;
  options.owner_home = *rc::gen::arbitrary<bool>();
  options.absorb = *rc::gen::arbitrary<bool>();
  options.owner_in_group = *rc::gen::arbitrary<bool>();
  options.min_move = *rc::gen::element(0, 0, 16, 256);
  const Plan plan = plan_halo_q(c.topo, c.counts, options);
  RC_CLASSIFY(plan.broadcasts.empty(), "no broadcast");
  RC_CLASSIFY(plan.broadcasts.size() > 4, "more than 4 broadcasts");
  ValidationOptions v;
  v.unique_experts = true;
  const auto violations = validate_plan(c.topo, c.counts, plan, v);
  RC_ASSERT(violations.empty());
  for (const Broadcast& b : plan.broadcasts) {
    if (options.owner_in_group) RC_ASSERT(b.owner_in_group());
    RC_ASSERT(b.mode != TransportMode::kPointToPoint);
  }
  check_rewrite(c, plan);
}

RC_GTEST_PROP(PlannerProps, IserPlansValidateAndNeverLoseToTheReference, ()) {
  const Case c = *gen_case();
  HaloQOptions options;
  options.min_move = *rc::gen::element(0, 0, 16);
  const Plan plan = plan_iser(c.topo, c.counts, options);
  RC_CLASSIFY(plan.broadcasts.empty(), "no broadcast");
  check_iser_plan_valid(c, plan);
  RC_ASSERT(plan.owner_uses_home_slot);
  // Broadcasts of one expert use pairwise disjoint groups.
  bool twice = false;
  for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
    for (size_t j = i + 1; j < plan.broadcasts.size(); ++j) {
      const Broadcast& x = plan.broadcasts[i];
      const Broadcast& y = plan.broadcasts[j];
      if (x.expert != y.expert) continue;
      twice = true;
      RC_ASSERT(x.group_begin + x.group_size <= y.group_begin ||
                y.group_begin + y.group_size <= x.group_begin);
    }
  }
  RC_CLASSIFY(twice, "an expert exported twice");
  check_rewrite(c, plan);
  // Max load never above the reference's (iser keeps the better of two placements).
  const Plan ref = plan_halo_q(c.topo, c.counts, options);
  RC_ASSERT(max_load(plan) <= max_load(ref));
}

// plan_iser's breadth-first candidates (docs/design.md §5) are kept only when strictly better
// after finishing: the max load with them is never above the max load without them, and where
// they change the plan it still validates (the property above checks every default plan).
// plan_iser of c with options, with and without the breadth-first candidates; fails when the
// max load with them is above the max load without them.
std::pair<Plan, Plan> plan_with_and_without_breadth_first(const Case& c, HaloQOptions options) {
  // The finest ladder starts from the plan before it: off in both, so that it cannot favour
  // either side.
  options.iser_finest_ladder = false;
  Plan with = plan_iser(c.topo, c.counts, options);
  options.iser_breadth_first = false;
  Plan without = plan_iser(c.topo, c.counts, options);
  RC_ASSERT(max_load(with) <= max_load(without));
  return {std::move(with), std::move(without)};
}

RC_GTEST_PROP(PlannerProps, BreadthFirstCandidatesNeverRaiseTheMax, ()) {
  const Case c = *gen_case();
  HaloQOptions options;
  options.min_move = *rc::gen::element(0, 0, 16);
  const auto [with, without] = plan_with_and_without_breadth_first(c, options);
  RC_CLASSIFY(max_load(with) < max_load(without), "a breadth-first candidate kept");
  if (max_load(with) == max_load(without)) {
    int32_t copies_with = 0;
    int32_t copies_without = 0;
    for (const Broadcast& b : with.broadcasts) copies_with += b.remote_copies();
    for (const Broadcast& b : without.broadcasts) copies_without += b.remote_copies();
    RC_ASSERT(copies_with <= copies_without);
  }
}

// The same on the skew families (docs/evaluation.md), where the breadth-first candidates win
// far more often than on gen_case's counts: every plan validates (owner payloads <= S, disjoint
// groups per expert, quotas summing to the routes) and rewrites conservingly.
RC_GTEST_PROP(PlannerProps, BreadthFirstOnSkewFamiliesValidates, ()) {
  const Case c = *gen_skew_case();
  const auto [with, without] = plan_with_and_without_breadth_first(c, HaloQOptions{});
  RC_CLASSIFY(!(with == without), "a breadth-first candidate kept");
  check_iser_plan_valid(c, with);
  check_rewrite(c, with);
}

// plan_iser's relay rounds (docs/design.md §5) start from the finished plan and never raise its
// max load; the comparisons with the breadth-first candidates run only above the finish's stop
// level T + T/kIserSlackDivisorFinest, so with them the max load is never above max(the max
// without them, that level). On the skew families (where relay broadcasts are placed) every plan
// validates and rewrites conservingly.
RC_GTEST_PROP(PlannerProps, RelayRoundsNeverEndAboveTheFinishWithout, ()) {
  const bool skew = *rc::gen::arbitrary<bool>();
  const Case c = skew ? *gen_skew_case() : *gen_case();
  HaloQOptions options;
  options.min_move = skew ? 0 : *rc::gen::element(0, 0, 16);
  options.iser_finest_ladder = false;  // it starts from the plan before it (see above)
  const Plan with = plan_iser(c.topo, c.counts, options);
  options.iser_relay = false;
  const Plan without = plan_iser(c.topo, c.counts, options);
  const int32_t T = with.target;  // one LSA team: the finish's stop level is T + T/d
  RC_ASSERT(max_load(with) <= std::max(max_load(without), T + T / kIserSlackDivisorFinest));
  RC_CLASSIFY(max_load(with) < max_load(without), "relay lowered the max");
  check_iser_plan_valid(c, with);
  check_rewrite(c, with);
}

// plan_iser's finest ladder (docs/design.md §5) keeps a candidate only when strictly better: the
// max load with it is never above the max load without it (ties: no more remote copies). On the
// skew families every plan validates and rewrites conservingly.
RC_GTEST_PROP(PlannerProps, FinestLadderNeverRaisesTheMax, ()) {
  const bool skew = *rc::gen::arbitrary<bool>();
  const Case c = skew ? *gen_skew_case() : *gen_case();
  HaloQOptions options;
  options.min_move = skew ? 0 : *rc::gen::element(0, 0, 16);
  const Plan with = plan_iser(c.topo, c.counts, options);
  options.iser_finest_ladder = false;
  const Plan without = plan_iser(c.topo, c.counts, options);
  RC_ASSERT(max_load(with) <= max_load(without));
  RC_CLASSIFY(max_load(with) < max_load(without), "the finest ladder lowered the max");
  check_iser_plan_valid(c, with);
  check_rewrite(c, with);
}

RC_GTEST_PROP(PlannerProps, TokenRewriteMatchesFlowRewrite, ()) {
  // Small shapes: tokens are materialized from the counts.
  const int P = *rc::gen::inRange(2, 17);
  const int H = *rc::gen::inRange(1, 9);
  const int S = *rc::gen::inRange(1, 5);
  const int top_k = *rc::gen::inRange(1, 4);
  const Topology topo = Topology::make(P, P * H, S);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const auto tokens = test_util::random_tokens(topo, /*tokens_per_rank=*/64, top_k, seed);
  const CountMatrix counts = CountMatrix::from_topk(tokens, P, 64, top_k, P * H);
  HaloQOptions options;
  options.owner_home = *rc::gen::arbitrary<bool>();
  const bool iser = *rc::gen::arbitrary<bool>();
  const Plan plan = iser ? plan_iser(topo, counts, options) : plan_halo_q(topo, counts, options);
  RC_CLASSIFY(plan.broadcasts.empty(), "no broadcast");
  const std::string mismatch =
      test_util::tokens_vs_flows_mismatch(topo, counts, plan, tokens, 64, top_k);
  if (!mismatch.empty()) RC_FAIL(mismatch);
}

RC_GTEST_PROP(PlannerProps, ResidentPolicyValidatesOverIterations, ()) {
  const Case c = *gen_case();
  PolicyOptions po;
  po.min_move = *rc::gen::element(0, 256);
  auto policy = make_policy("resident", c.topo, po);
  for (int it = 0; it < 3; ++it) {
    const CountMatrix counts =
        it == 0 ? c.counts
                : testing::random_skewed_counts(c.topo.num_ranks, c.topo.num_experts, 1000,
                                                static_cast<uint64_t>(it) * 7 + 3);
    const auto result = policy->plan(counts);
    RC_ASSERT(validate_plan(c.topo, counts, result.plan, policy->validation()).empty());
    const auto loads = loads_from_flows(c.topo.num_ranks, result.flows);
    for (int r = 0; r < c.topo.num_ranks; ++r) RC_ASSERT(loads[r] == result.plan.loads[r]);
  }
}

// iser's chain leveling (src/core/planner/iser_chains.cpp) on the room-aware placement before
// any leveling (place_iser), where chains have most to move.
std::vector<int64_t> expert_quotas(const Plan& plan, int num_experts) {
  std::vector<int64_t> sum(num_experts, 0);
  for (const Broadcast& b : plan.broadcasts) {
    sum[b.expert] += std::accumulate(b.quota.begin(), b.quota.end(), int64_t{0});
  }
  return sum;
}

RC_GTEST_PROP(PlannerProps, ChainsKeepRoutesAndNeverRaiseTheMax, ()) {
  const Case c = *gen_case();
  const int P = c.topo.num_ranks;
  PlannerWorkspace ws;
  Plan plan;
  place_iser(c.topo, c.counts, HaloQOptions{}, ws, plan);
  const Plan before = plan;
  level_chains(c.topo, 0, ws, plan);
  const bool moved = plan.loads != before.loads;
  RC_CLASSIFY(moved, "chains moved routes");
  RC_CLASSIFY(max_load(plan) < max_load(before), "max load lowered");
  RC_ASSERT(std::accumulate(plan.loads.begin(), plan.loads.end(), int64_t{0}) ==
            std::accumulate(before.loads.begin(), before.loads.end(), int64_t{0}));
  RC_ASSERT(max_load(plan) <= max_load(before));
  RC_ASSERT(expert_quotas(plan, c.topo.num_experts) == expert_quotas(before, c.topo.num_experts));
  RC_ASSERT(plan.broadcasts.size() == before.broadcasts.size());
  std::vector<int> latest(c.topo.num_experts, -1);
  for (size_t b = 0; b < plan.broadcasts.size(); ++b) latest[plan.broadcasts[b].expert] = b;
  for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
    const Broadcast& x = plan.broadcasts[i];
    const Broadcast& y = before.broadcasts[i];
    RC_ASSERT(x.expert == y.expert && x.owner == y.owner && x.level == y.level &&
              x.group_begin == y.group_begin && x.group_size == y.group_size);
    for (int r = 0; r < P; ++r) {
      RC_ASSERT(x.quota[r] >= 0);
      // Quotas only on hosts: group members other than the owner, the owner on the latest.
      const bool host = r == x.owner ? latest[x.expert] == static_cast<int>(i) : x.in_group(r);
      if (!host) RC_ASSERT(x.quota[r] == 0);
    }
  }
  // Each rank's load changed by exactly its quota change.
  for (int r = 0; r < P; ++r) {
    int64_t dq = 0;
    for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
      dq += plan.broadcasts[i].quota[r] - before.broadcasts[i].quota[r];
    }
    RC_ASSERT(plan.loads[r] - before.loads[r] == dq);
  }
}

// iser's top-up exports (src/core/planner/iser_top_up.cpp) after a slack placement: the
// placed broadcasts stay, the new ones export an expert without a broadcast from outside its
// group, and the plan keeps S per owner and per member, routes and a max that never rises.
RC_GTEST_PROP(PlannerProps, TopUpKeepsSlotsAndRoutesAndNeverRaisesTheMax, ()) {
  const Case c = *gen_case();
  const int P = c.topo.num_ranks;
  const int S = c.topo.num_slots;
  PlannerWorkspace ws;
  Plan plan;
  prepare_loads(c.topo, c.counts, ws, plan);
  const std::vector<int32_t> home_loads = plan.loads;
  // At a slack water level (T + T/32, plan_iser's coarsest) the ranks between T and it export
  // nothing: what top-up is for.
  place_iser(c.topo, c.counts, HaloQOptions{}, ws, plan, kIserSlackDivisorCoarsest);
  const Plan before = plan;
  team_water_levels(c.topo, plan.target, 0, home_loads, ws);
  const bool relay = *rc::gen::arbitrary<bool>();
  const bool relayed = top_up_exports(c.topo, HaloQOptions{}, 0, relay, ws, plan);
  RC_ASSERT(relay || !relayed);
  RC_CLASSIFY(plan.broadcasts.size() > before.broadcasts.size(), "top-up exported");
  RC_CLASSIFY(relayed, "a relay broadcast");
  RC_ASSERT(std::accumulate(plan.loads.begin(), plan.loads.end(), int64_t{0}) ==
            std::accumulate(before.loads.begin(), before.loads.end(), int64_t{0}));
  RC_ASSERT(max_load(plan) <= max_load(before));
  RC_ASSERT(plan.broadcasts.size() >= before.broadcasts.size());
  std::vector<int> sent(P, 0);
  std::vector<int> received(P, 0);
  std::vector<int> exported(c.topo.num_experts, 0);
  for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
    const Broadcast& x = plan.broadcasts[i];
    ++sent[x.owner];
    for (int m = x.group_begin; m < x.group_begin + x.group_size; ++m) ++received[m];
    if (i < before.broadcasts.size()) {
      RC_ASSERT(x == before.broadcasts[i]);
      ++exported[x.expert];
      continue;
    }
    RC_ASSERT(exported[x.expert]++ == 0);
    RC_ASSERT(!x.in_group(x.owner));
    RC_ASSERT(c.topo.owner_of(x.expert) == x.owner);
    int64_t sum = 0;
    for (int r = 0; r < P; ++r) {
      RC_ASSERT(x.quota[r] >= 0);
      if (r != x.owner && !x.in_group(r)) RC_ASSERT(x.quota[r] == 0);
      sum += x.quota[r];
    }
    RC_ASSERT(sum == ws.hist[x.expert]);
  }
  for (int r = 0; r < P; ++r) RC_ASSERT(sent[r] <= S && received[r] <= S);
}

}  // namespace
}  // namespace iser
