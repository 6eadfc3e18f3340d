// Baseline policies (docs/design.md §6) on small, hand-checked count matrices.
#include <gtest/gtest.h>

#include "baselines_test_util.h"
#include "iser/error.h"
#include "iser/metrics.h"
#include "iser/policy.h"
#include "iser/validator.h"

namespace iser {
namespace {

using baselines_test::counts_from_rows;
using baselines_test::flow_conservation_error;
using baselines_test::sorted;

// P = 4, E = 8 (H = 2: rank r owns experts 2r, 2r+1), S = 2.
// hist = [40, 10, 10, 5, 5, 5, 5, 0]; home loads [50, 15, 10, 5]; total 80, T = 20.
CountMatrix skewed_counts() {
  return counts_from_rows({
      {10, 10, 0, 0, 0, 0, 0, 0},
      {10, 0, 10, 5, 0, 0, 0, 0},
      {10, 0, 0, 0, 5, 5, 0, 0},
      {10, 0, 0, 0, 0, 0, 5, 0},
  });
}

PolicyResult run_checked(Policy& policy, const Topology& topo, const CountMatrix& counts) {
  PolicyResult result = policy.plan(counts);
  const auto violations = validate_plan(topo, counts, result.plan, policy.validation());
  EXPECT_TRUE(violations.empty()) << policy.name() << ": " << violations.front();
  EXPECT_EQ(flow_conservation_error(counts, result.flows), "") << policy.name();
  const auto loads = loads_from_flows(topo.num_ranks, result.flows);
  EXPECT_EQ(std::vector<int64_t>(result.plan.loads.begin(), result.plan.loads.end()), loads)
      << policy.name();
  return result;
}

TEST(Baselines, RegisteredNames) {
  const auto names = available_policies();
  for (const char* name :
       {"eplb", "eplb-window", "all-rank", "all-rank-balanced", "p2p", "p2p-limited"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    EXPECT_EQ(make_policy(name, Topology::make(4, 8, 2))->name(), name);
  }
}

TEST(P2p, GreedyCopiesTheHotExpertToTheColdestRanks) {
  const auto topo = Topology::make(4, 8, 2);
  const auto counts = skewed_counts();
  auto policy = make_policy("p2p", topo);
  const auto result = run_checked(*policy, topo, counts);
  // o = 0 (50), e = 0 (40 left): -> rank 3 (5): move min(30, 15, 40) = 15; loads 35 15 10 20.
  // o = 0, e = 0 (25 left): -> rank 2 (10): move min(15, 10, 25) = 10; loads 25 15 20 20.
  // o = 0, e = 0 (15 left): -> rank 1 (15): move min(5, 5, 15) = 5; loads 20 20 20 20: stop.
  const auto& b = result.plan.broadcasts;
  ASSERT_EQ(b.size(), 3u);
  const int dst[] = {3, 2, 1};
  const std::vector<int32_t> quota[] = {{10, 0, 0, 15}, {0, 0, 10, 0}, {0, 5, 0, 0}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b[i].expert, 0);
    EXPECT_EQ(b[i].owner, 0);
    EXPECT_EQ(b[i].level, kUnalignedLevel);
    EXPECT_EQ(b[i].group_begin, dst[i]);
    EXPECT_EQ(b[i].group_size, 1);
    EXPECT_EQ(b[i].helper, 0);
    EXPECT_EQ(b[i].mode, TransportMode::kPointToPoint);
    EXPECT_EQ(b[i].quota, quota[i]) << i;  // the owner keeps its 10 on the first replica
  }
  EXPECT_EQ(result.plan.loads, (std::vector<int32_t>{20, 20, 20, 20}));
  // Local first: rank 1 keeps 5 of its 10 routes of e0, its other 5 fill rank 3's spare quota.
  const std::vector<RouteFlow> expected = {
      {0, 0, 0, 10}, {1, 0, 1, 5}, {1, 0, 3, 5}, {2, 0, 2, 10}, {3, 0, 3, 10}, {0, 1, 0, 10},
      {1, 2, 1, 10}, {1, 3, 1, 5}, {2, 4, 2, 5}, {2, 5, 2, 5},  {3, 6, 3, 5}};
  EXPECT_EQ(sorted(result.flows), sorted(expected));
  const auto m = measure_invocation(topo, counts, result);
  EXPECT_EQ(m.remote_copies, 3);
  EXPECT_EQ(m.max_owner_payloads, 3);
}

TEST(P2p, LimitedStopsAtSCopiesPerOwner) {
  const auto topo = Topology::make(4, 8, 2);
  const auto counts = skewed_counts();
  auto policy = make_policy("p2p-limited", topo);
  const auto result = run_checked(*policy, topo, counts);
  // The first two copies as above; then rank 0 has sent S = 2 and is frozen; the next hottest
  // rank (2, load 20) is not above T.
  ASSERT_EQ(result.plan.broadcasts.size(), 2u);
  EXPECT_EQ(result.plan.broadcasts[0].quota, (std::vector<int32_t>{15, 0, 0, 15}));
  EXPECT_EQ(result.plan.broadcasts[1].quota, (std::vector<int32_t>{0, 0, 10, 0}));
  EXPECT_EQ(result.plan.loads, (std::vector<int32_t>{25, 15, 20, 20}));
  EXPECT_EQ(policy->validation().max_exports_per_owner, 2);
  EXPECT_FALSE(policy->validation().require_aligned_groups);
}

TEST(P2p, SpreadsOverExpertsAndRespectsHelperSlots) {
  // P = 2, E = 4 (H = 2), S = 1: rank 0 owns e0 (12) and e1 (8); rank 1 owns e2, e3 (0).
  // T = 10. o = 0, e0 -> rank 1 (0): move min(10, 10, 12) = 10: loads 10 10: stop.
  const auto topo = Topology::make(2, 4, 1);
  const auto counts = counts_from_rows({{6, 4, 0, 0}, {6, 4, 0, 0}});
  auto policy = make_policy("p2p", topo);
  const auto result = run_checked(*policy, topo, counts);
  ASSERT_EQ(result.plan.broadcasts.size(), 1u);
  EXPECT_EQ(result.plan.broadcasts[0].quota, (std::vector<int32_t>{2, 10}));
  // Rank 1 computes its 6 routes of e0 and 4 of rank 0's; rank 0 keeps 2.
  const std::vector<RouteFlow> expected = {
      {0, 0, 0, 2}, {0, 0, 1, 4}, {1, 0, 1, 6}, {0, 1, 0, 4}, {1, 1, 0, 4}};
  EXPECT_EQ(sorted(result.flows), sorted(expected));
  // No helper slots: nothing moves.
  const auto topo0 = Topology::make(2, 4, 0);
  auto none = make_policy("p2p", topo0);
  EXPECT_TRUE(run_checked(*none, topo0, counts).plan.broadcasts.empty());
}

TEST(AllRank, TopSExpertsOnEveryRankComputedLocally) {
  const auto topo = Topology::make(4, 8, 2);
  const auto counts = skewed_counts();
  auto policy = make_policy("all-rank", topo);
  const auto result = run_checked(*policy, topo, counts);
  // Top 2 by hist: e0 (40), then e1 (10, tie with e2: smaller id).
  const auto& b = result.plan.broadcasts;
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].expert, 0);
  EXPECT_EQ(b[0].helper, 0);
  EXPECT_EQ(b[0].quota, (std::vector<int32_t>{10, 10, 10, 10}));
  EXPECT_EQ(b[1].expert, 1);
  EXPECT_EQ(b[1].helper, 1);
  EXPECT_EQ(b[1].quota, (std::vector<int32_t>{10, 0, 0, 0}));
  for (const Broadcast& x : b) {
    EXPECT_EQ(x.level, 0);
    EXPECT_EQ(x.group_begin, 0);
    EXPECT_EQ(x.group_size, 4);
    EXPECT_EQ(x.mode, TransportMode::kOwnerDirect);
  }
  // Rank 0: 50 - 40 - 10 + 10 + 10 = 20; rank 1: 15 + 10; rank 2: 10 + 10; rank 3: 5 + 10.
  EXPECT_EQ(result.plan.loads, (std::vector<int32_t>{20, 25, 20, 15}));
  for (const RouteFlow& f : result.flows) {
    if (f.expert <= 1) {
      EXPECT_EQ(f.src_rank, f.dst_rank);
    }
  }
  EXPECT_EQ(measure_invocation(topo, counts, result).remote_copies, 2 * 3);
}

TEST(AllRank, BalancedFillsTheWaterLevelLocalFirst) {
  const auto topo = Topology::make(4, 8, 2);
  const auto counts = skewed_counts();
  auto policy = make_policy("all-rank-balanced", topo);
  const auto result = run_checked(*policy, topo, counts);
  // Base loads without e0, e1: [0, 15, 10, 5], mass 50. Level 20 (room 50): Q = [19, 4, 9, 14]
  // plus one each for the 4 routes left = [20, 5, 10, 15]. Local first: e0 gives 10, 5, 10, 10,
  // e1 gives rank 0 its 10; e0's 5 routes left go to rank 3 (the only rank with room left).
  const auto& b = result.plan.broadcasts;
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].quota, (std::vector<int32_t>{10, 5, 10, 15}));
  EXPECT_EQ(b[1].quota, (std::vector<int32_t>{10, 0, 0, 0}));
  EXPECT_EQ(result.plan.loads, (std::vector<int32_t>{20, 20, 20, 20}));
  const std::vector<RouteFlow> expected_e0 = {
      {0, 0, 0, 10}, {1, 0, 1, 5}, {1, 0, 3, 5}, {2, 0, 2, 10}, {3, 0, 3, 10}};
  std::vector<RouteFlow> e0;
  for (const RouteFlow& f : result.flows) {
    if (f.expert == 0) e0.push_back(f);
  }
  EXPECT_EQ(sorted(e0), sorted(expected_e0));
}

TEST(AllRank, SkipsExpertsNobodyRoutesTo) {
  const auto topo = Topology::make(2, 4, 3);
  const auto counts = counts_from_rows({{0, 3, 0, 0}, {0, 1, 2, 0}});
  auto policy = make_policy("all-rank", topo);
  const auto result = run_checked(*policy, topo, counts);
  ASSERT_EQ(result.plan.broadcasts.size(), 2u);  // e1 (4), e2 (2); e0 and e3 have no routes
  EXPECT_EQ(result.plan.broadcasts[0].expert, 1);
  EXPECT_EQ(result.plan.broadcasts[1].expert, 2);
}

TEST(EplbPolicy, StaticPlacementFromTheWholeTrace) {
  const auto topo = Topology::make(4, 8, 2);  // 16 physical slots, 4 per rank
  const auto counts = skewed_counts();
  auto policy = make_policy("eplb", topo);
  EXPECT_THROW(policy->plan(counts), Error);  // needs the whole trace first
  const std::vector<CountMatrix> trace = {counts};
  policy->prepare(trace);
  const auto result = run_checked(*policy, topo, counts);
  EXPECT_TRUE(result.plan.broadcasts.empty());
  // EPLB (R = 16, one group, one node, 4 GPUs) on hist [40, 10, 10, 5, 5, 5, 5, 0]: the eight
  // redundant replicas go to e0 x6 (cnt 7), e1, e2. Packing four per GPU (loads 40/7 = 5.71,
  // then 5, then 0) gives the hosts of e0's replicas in replica order [0, 1, 2, 3, 0, 1, 2],
  // e1 [3, 0], e2 [3, 1], e3 [0], e4 [1], e5 [2], e6 [3], e7 [2].
  // Split of e0 (10 routes per source over 7 replicas: 1 each, 3 leftovers): source s gives its
  // leftovers to its own replicas first, then to replicas s % 7, s % 7 + 1, ...
  //   s=0: own x0, x4 (+2 on rank 0), then x1 (rank 1): ranks 4 3 2 1
  //   s=1: own x1, x5, then x2:                       ranks 2 4 3 1
  //   s=2: own x2, x6, then x3:                       ranks 2 2 4 2
  //   s=3: own x3, then x4 (rank 0), x5 (rank 1):     ranks 3 3 2 2
  const std::vector<RouteFlow> expected = {
      {0, 0, 0, 4}, {0, 0, 1, 3}, {0, 0, 2, 2}, {0, 0, 3, 1},  //
      {1, 0, 0, 2}, {1, 0, 1, 4}, {1, 0, 2, 3}, {1, 0, 3, 1},  //
      {2, 0, 0, 2}, {2, 0, 1, 2}, {2, 0, 2, 4}, {2, 0, 3, 2},  //
      {3, 0, 0, 3}, {3, 0, 1, 3}, {3, 0, 2, 2}, {3, 0, 3, 2},  //
      {0, 1, 0, 5}, {0, 1, 3, 5}, {1, 2, 1, 5}, {1, 2, 3, 5},  //
      {1, 3, 0, 5}, {2, 4, 1, 5}, {2, 5, 2, 5}, {3, 6, 3, 5}};
  EXPECT_EQ(sorted(result.flows), sorted(expected));
  EXPECT_EQ(result.plan.loads, (std::vector<int32_t>{21, 22, 16, 21}));
  EXPECT_EQ(measure_invocation(topo, counts, result).remote_copies, 0);
}

TEST(EplbPolicy, WindowPlansFromPreviousInvocationsOnly) {
  const auto topo = Topology::make(4, 8, 2);
  const auto a = skewed_counts();
  const auto b = counts_from_rows({
      {0, 0, 0, 0, 0, 0, 9, 9},
      {0, 0, 0, 0, 0, 0, 9, 9},
      {1, 1, 1, 1, 1, 1, 1, 1},
      {0, 0, 3, 0, 0, 0, 0, 9},
  });
  PolicyOptions options;
  options.eplb_window = 1;
  auto window = make_policy("eplb-window", topo, options);
  // First invocation: no history, no balancing.
  const auto first = run_checked(*window, topo, a);
  EXPECT_EQ(sorted(first.flows), sorted(home_flows(topo, a)));
  // Second: the placement of a static EPLB planned from `a` alone.
  auto from_a = make_policy("eplb", topo);
  const std::vector<CountMatrix> trace_a = {a};
  from_a->prepare(trace_a);
  EXPECT_EQ(sorted(run_checked(*window, topo, b).flows), sorted(from_a->plan(b).flows));
  // Third: window 1 forgets `a`; the placement comes from `b` alone.
  auto from_b = make_policy("eplb", topo);
  const std::vector<CountMatrix> trace_b = {b};
  from_b->prepare(trace_b);
  EXPECT_EQ(sorted(run_checked(*window, topo, a).flows), sorted(from_b->plan(a).flows));
  // prepare() gives the windowed policy nothing (it must not see the future).
  auto fresh = make_policy("eplb-window", topo, options);
  fresh->prepare(trace_b);
  EXPECT_EQ(sorted(run_checked(*fresh, topo, a).flows), sorted(home_flows(topo, a)));
}

TEST(EplbPolicy, RejectsMismatchedCounts) {
  auto policy = make_policy("eplb-window", Topology::make(4, 8, 2));
  EXPECT_THROW(policy->plan(CountMatrix(2, 8)), Error);
  PolicyOptions bad;
  bad.eplb_window = -1;
  EXPECT_THROW(make_policy("eplb-window", Topology::make(4, 8, 2), bad), Error);
}

}  // namespace
}  // namespace iser
