// Unit tests of the planner stages, the rewrite on non-HALO-Q plans, the plan JSON and the
// resident policy.
#include <gtest/gtest.h>

#include "iser/error.h"
#include "iser/plan_json.h"
#include "iser/planner.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/validator.h"

namespace iser {
namespace {

Broadcast group_broadcast(int32_t expert, int32_t owner, int32_t level, int32_t begin, int32_t size,
                          std::vector<int32_t> quota) {
  Broadcast b;
  b.expert = expert;
  b.owner = owner;
  b.level = level;
  b.group_begin = begin;
  b.group_size = size;
  b.quota = std::move(quota);
  return b;
}

TEST(PlannerStages, CandidatesBreakTiesTowardTheSmallerExpert) {
  // P = 2, H = 4, S = 2 (C = 2). Rank 0's experts all have hist 5: candidates e0 then e1; both
  // get exported while rank 0 stays above T, never e2 or e3.
  const auto topo = Topology::make(2, 8, 2, 1);
  CountMatrix counts(2, 8);
  for (int e = 0; e < 4; ++e) counts.at(0, e) = 5;
  const Plan plan = plan_halo_q(topo, counts);
  ASSERT_EQ(plan.broadcasts.size(), 2u);
  EXPECT_EQ(plan.broadcasts[0].expert, 0);
  EXPECT_EQ(plan.broadcasts[1].expert, 1);
}

TEST(PlannerStages, ColoringFailureIsAnInternalError) {
  // Three broadcasts on one rank with S = 2 break the coloring precondition.
  const auto topo = Topology::make(4, 8, 2, 4);
  CountMatrix counts(4, 8);
  Plan plan = make_empty_plan(topo, counts);
  for (int e = 0; e < 3; ++e)
    plan.broadcasts.push_back(group_broadcast(e, 0, 0, 0, 4, {0, 0, 0, 0}));
  PlannerWorkspace ws;
  EXPECT_THROW(color_slots(topo, plan, ws), Error);
}

TEST(PlannerStages, TransportPureGroupAndCoarsestInGroup) {
  // P = 8, levels 8 and 4. b0: owner 0 on [0,8) (level 0); b1: owner 0 on [0,4); b2: owner 5
  // on [4,8). [0,4) meets b0 (a different group) -> not pure; b1 is not owner 0's coarsest
  // in-group broadcast (b0 is) -> SAMI. b0 is the coarsest -> owner-direct. b2: [4,8) meets
  // b0 -> not pure, but it is owner 5's only in-group broadcast -> owner-direct.
  const auto topo = Topology::make(8, 16, 2, 4);
  CountMatrix counts(8, 16);
  Plan plan = make_empty_plan(topo, counts);
  const std::vector<int32_t> zero(8, 0);
  plan.broadcasts.push_back(group_broadcast(0, 0, 0, 0, 8, zero));
  plan.broadcasts.push_back(group_broadcast(1, 0, 1, 0, 4, zero));
  plan.broadcasts.push_back(group_broadcast(10, 5, 1, 4, 4, zero));
  plan.broadcasts.push_back(group_broadcast(12, 6, 1, 0, 4, zero));  // owner outside -> SAMI
  assign_transport(topo, plan);
  EXPECT_EQ(plan.broadcasts[0].mode, TransportMode::kOwnerDirect);
  EXPECT_EQ(plan.broadcasts[1].mode, TransportMode::kSami);
  EXPECT_EQ(plan.broadcasts[2].mode, TransportMode::kOwnerDirect);
  EXPECT_EQ(plan.broadcasts[3].mode, TransportMode::kSami);
}

TEST(PlannerStages, RewriteOfPointToPointPlanWithTwoReplicas) {
  // P = 4, H = 1: expert 0 (owner 0) copied to ranks 2 and 3 (groups of one, unaligned). The
  // owner's quota sits on the first broadcast. Combined quotas [2, 0, 3, 3]; c = [4, 4, 0, 0].
  // diag [2,0,0,0]; supply [2,4,0,0]; demand [0,0,3,3]: 0 -> 2 (2), 1 -> 2 (1), 1 -> 3 (3).
  const auto topo = Topology::make(4, 4, 1);
  CountMatrix counts(4, 4);
  counts.at(0, 0) = 4;
  counts.at(1, 0) = 4;
  Plan plan = make_empty_plan(topo, counts);
  Broadcast b2 = group_broadcast(0, 0, kUnalignedLevel, 2, 1, {2, 0, 3, 0});
  b2.mode = TransportMode::kPointToPoint;
  Broadcast b3 = group_broadcast(0, 0, kUnalignedLevel, 3, 1, {0, 0, 0, 3});
  b3.mode = TransportMode::kPointToPoint;
  plan.broadcasts = {b2, b3};
  plan.loads = {2, 0, 3, 3};
  ValidationOptions v;
  v.require_aligned_groups = false;
  v.max_exports_per_owner = 0;
  EXPECT_TRUE(validate_plan(topo, counts, plan, v).empty());
  EXPECT_EQ(rewrite_flows(topo, counts, plan),
            (std::vector<RouteFlow>{{0, 0, 0, 2}, {0, 0, 2, 2}, {1, 0, 2, 1}, {1, 0, 3, 3}}));
  // Rank 1's four routes: d = 2 first (1 route, slot 2·2 + 1 = 5), then d = 3 (3 routes, 7).
  const std::vector<int32_t> ids = {0, 0, 0, 0};
  std::vector<int32_t> slots(4);
  rewrite_tokens(topo, counts, plan, 1, ids, 1, slots);
  EXPECT_EQ(slots, (std::vector<int32_t>{5, 7, 7, 7}));
}

TEST(PlannerStages, RewriteRejectsInconsistentInputs) {
  const auto topo = Topology::make(2, 2, 1);
  CountMatrix counts(2, 2);
  counts.at(0, 0) = 2;
  Plan plan = make_empty_plan(topo, counts);
  std::vector<int32_t> slots(3);
  EXPECT_THROW(rewrite_tokens(topo, counts, plan, 0, std::vector<int32_t>{0, 0, 0}, 1, slots),
               Error);  // more routes than counted
  std::vector<int32_t> one(1);
  EXPECT_THROW(rewrite_tokens(topo, counts, plan, 0, std::vector<int32_t>{0}, 1, one), Error);
  EXPECT_THROW(rewrite_tokens(topo, counts, plan, 0, std::vector<int32_t>{5, 0}, 1, slots), Error);
  plan.broadcasts.push_back(group_broadcast(0, 0, 0, 0, 2, {1, 0}));  // quotas sum 1 != 2
  EXPECT_THROW(rewrite_flows(topo, counts, plan), Error);
}

TEST(PlannerStages, PlanJsonRoundTrip) {
  const auto topo = Topology::make(8, 16, 2, 2);
  CountMatrix counts(8, 16);
  for (int e = 0; e < 16; ++e) counts.at(e % 8, e) = (e < 2 ? 40 : 3) + e;
  const Plan plan = plan_halo_q(topo, counts);
  ASSERT_FALSE(plan.broadcasts.empty());
  EXPECT_EQ(plan_from_json(plan_to_json(plan), "test"), plan);
  EXPECT_EQ(counts_from_json(counts_to_json(counts), "test"), counts);
  auto bad = plan_to_json(plan);
  bad["broadcasts"][0]["mode"] = "carrier-pigeon";
  EXPECT_THROW(plan_from_json(bad, "test"), Error);
}

TEST(PlannerStages, ResidentKeepsTheReplicaAndMovesNoBytes) {
  // The same counts twice: the second plan is identical in placement, and every broadcast is
  // resident (same expert, group and helper index as before).
  const auto topo = Topology::make(8, 64, 4);
  CountMatrix counts(8, 64);
  for (int s = 0; s < 8; ++s) {
    for (int e = 0; e < 64; ++e) counts.at(s, e) = (e < 3 ? 200 : 10) + (s * 7 + e) % 5;
  }
  auto policy = make_policy("resident", topo);
  const auto first = policy->plan(counts);
  ASSERT_FALSE(first.plan.broadcasts.empty());
  EXPECT_EQ(first.resident_broadcasts, 0);
  const auto second = policy->plan(counts);
  EXPECT_EQ(second.resident_broadcasts, static_cast<int32_t>(second.plan.broadcasts.size()));
  ASSERT_EQ(first.plan.broadcasts.size(), second.plan.broadcasts.size());
  for (size_t i = 0; i < first.plan.broadcasts.size(); ++i) {
    EXPECT_EQ(first.plan.broadcasts[i].helper, second.plan.broadcasts[i].helper);
    EXPECT_TRUE(second.plan.broadcasts[i].resident);
  }
  // The reference without a previous plan marks nothing resident.
  for (const Broadcast& b : plan_halo_q(topo, counts).broadcasts) EXPECT_FALSE(b.resident);
}

TEST(PlannerStages, IserStatelessPlansEachInvocationFromItsCountsAlone) {
  // iser-stateless is plan_iser without a previous plan, every time (the GPU planner's form);
  // iser keeps the first invocation's replicas resident on the second.
  const auto topo = Topology::make(8, 64, 4);
  CountMatrix counts(8, 64);
  for (int s = 0; s < 8; ++s) {
    for (int e = 0; e < 64; ++e) counts.at(s, e) = (e < 3 ? 200 : 10) + (s * 7 + e) % 5;
  }
  const Plan want = plan_iser(topo, counts);
  ASSERT_FALSE(want.broadcasts.empty());
  auto stateless = make_policy("iser-stateless", topo);
  auto resident = make_policy("iser", topo);
  resident->plan(counts);
  EXPECT_EQ(resident->plan(counts).resident_broadcasts,
            static_cast<int32_t>(want.broadcasts.size()));
  for (int i = 0; i < 2; ++i) {
    const PolicyResult got = stateless->plan(counts);
    EXPECT_EQ(got.plan, want) << "invocation " << i;
    EXPECT_EQ(got.resident_broadcasts, 0) << "invocation " << i;
  }
}

TEST(PlannerStages, MinMoveSkipsSmallReplications) {
  // Case A of the golden tests moves 24 then 4 routes; min_move = 5 keeps only the first.
  const auto topo = Topology::make(4, 8, 2, 2);
  CountMatrix counts(4, 8);
  const int32_t rows[4][8] = {{10, 2, 3, 2, 2, 1, 1, 0},
                              {10, 2, 3, 2, 2, 1, 0, 1},
                              {10, 2, 2, 1, 2, 1, 1, 0},
                              {10, 2, 2, 1, 2, 1, 0, 1}};
  for (int s = 0; s < 4; ++s) {
    for (int e = 0; e < 8; ++e) counts.at(s, e) = rows[s][e];
  }
  HaloQOptions options;
  options.min_move = 5;
  const Plan plan = plan_halo_q(topo, counts, options);
  ASSERT_EQ(plan.broadcasts.size(), 1u);
  EXPECT_EQ(plan.broadcasts[0].expert, 0);
  EXPECT_EQ(plan.loads, (std::vector<int32_t>{24, 16, 20, 20}));
}

}  // namespace
}  // namespace iser
