// Per-slot loads of a plan (iser::moe::slot_loads): host code, runs without a GPU.
#include <numeric>

#include <gtest/gtest.h>

#include "iser/error.h"
#include "iser/moe.h"
#include "iser/policy.h"
#include "iser/trace.h"

namespace iser::moe {
namespace {

TEST(SlotLoads, HaloQPlanOnBundledTraceKeepsEveryRoute) {
  const Topology topo = Topology::make(8, 384, 4);
  const auto trace = open_trace(bundled_default_trace());
  const CountMatrix counts = trace->counts(20, 0, 8, 2048);
  const PolicyResult result = make_policy("halo-q", topo)->plan(counts);
  ASSERT_FALSE(result.plan.broadcasts.empty());
  const std::vector<int32_t> loads = slot_loads(topo, counts, result.plan);
  const int per_rank = topo.slots_per_rank();
  ASSERT_EQ(static_cast<int>(loads.size()), topo.num_ranks * per_rank);
  const std::vector<int64_t> hist = counts.histogram();
  std::vector<int64_t> per_expert(topo.num_experts, 0);
  for (int e = 0; e < topo.num_experts; ++e) per_expert[e] = loads[topo.home_slot(e)];
  for (const Broadcast& b : result.plan.broadcasts) {
    for (int r = b.group_begin; r < b.group_begin + b.group_size; ++r) {
      per_expert[b.expert] += loads[topo.helper_slot(r, b.helper)];
    }
  }
  EXPECT_EQ(per_expert, hist);  // every route of every expert lands in exactly one slot
  for (int r = 0; r < topo.num_ranks; ++r) {
    const auto begin = loads.begin() + r * per_rank;
    EXPECT_EQ(std::accumulate(begin, begin + per_rank, int64_t{0}), result.plan.loads[r]);
  }
}

TEST(SlotLoads, EmptyPlanIsTheHomeLoads) {
  const Topology topo = Topology::make(4, 16, 2);
  CountMatrix counts(4, 16);
  for (int s = 0; s < 4; ++s) {
    for (int e = 0; e < 16; ++e) counts.at(s, e) = (s + 1) * (e % 5);
  }
  const std::vector<int32_t> loads = slot_loads(topo, counts, make_empty_plan(topo, counts));
  const std::vector<int64_t> hist = counts.histogram();
  for (int e = 0; e < 16; ++e) EXPECT_EQ(loads[topo.home_slot(e)], hist[e]);
  for (int r = 0; r < 4; ++r) {
    for (int h = 0; h < 2; ++h) EXPECT_EQ(loads[topo.helper_slot(r, h)], 0);
  }
}

TEST(SlotLoads, RejectsMismatchedCounts) {
  const Topology topo = Topology::make(4, 16, 2);
  const CountMatrix counts(2, 16);
  EXPECT_THROW(slot_loads(topo, counts, Plan{}), Error);
}

}  // namespace
}  // namespace iser::moe
