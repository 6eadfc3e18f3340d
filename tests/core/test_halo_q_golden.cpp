// Golden HALO-Q plans worked out by hand from docs/design.md §4 (each case's derivation is in its
// comment; every number in the expectations comes from it, not from running the planner).
//
// Notation: c[s][e] counts, hist[e], L loads, T water level, C = min(S, H) candidates.
// Global slot id = r·(H+S) + local slot (home [0,H), helper H+h).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "iser/planner.h"
#include "iser/rewrite.h"
#include "iser/validator.h"

namespace iser {
namespace {

CountMatrix make_counts(const std::vector<std::vector<int32_t>>& rows) {
  CountMatrix counts(static_cast<int>(rows.size()), static_cast<int>(rows[0].size()));
  for (size_t s = 0; s < rows.size(); ++s) {
    for (size_t e = 0; e < rows[s].size(); ++e) counts.at(s, e) = rows[s][e];
  }
  return counts;
}

// hist[e] spread over P sources as evenly as possible (the first hist % P sources get one more).
CountMatrix spread_counts(int num_ranks, const std::vector<int32_t>& hist) {
  CountMatrix counts(num_ranks, static_cast<int>(hist.size()));
  for (size_t e = 0; e < hist.size(); ++e) {
    for (int s = 0; s < num_ranks; ++s) {
      counts.at(s, e) = hist[e] / num_ranks + (s < hist[e] % num_ranks ? 1 : 0);
    }
  }
  return counts;
}

Broadcast make_broadcast(int32_t expert, int32_t owner, int32_t level, int32_t begin, int32_t size,
                         int32_t helper, TransportMode mode, std::vector<int32_t> quota) {
  Broadcast b;
  b.expert = expert;
  b.owner = owner;
  b.level = level;
  b.group_begin = begin;
  b.group_size = size;
  b.helper = helper;
  b.mode = mode;
  b.quota = std::move(quota);
  return b;
}

constexpr auto kDirect = TransportMode::kOwnerDirect;
constexpr auto kSami = TransportMode::kSami;

// ---- Case A: owner outside and inside its group, north-west-corner rewrite -------------------
// P = 4, E = 8 (H = 2), S = 2, g_min = 2: levels 0 (size 4) and 1 (size 2); C = 2.
//   rows c[s] = s0 [10,2,3,2,2,1,1,0]  s1 [10,2,3,2,2,1,0,1]
//               s2 [10,2,2,1,2,1,1,0]  s3 [10,2,2,1,2,1,0,1]
//   hist = [40,8,10,6,8,4,2,2], L = [48,16,12,4], total 80, T = 20.
// Pass 1: owner 0 (48 > T); candidate e0, mass 40, give = min(28, 40) = 28; need = ceil(40/20)
//   = 2 -> wanted level 1 (size 2). Level 1 rooms: [0,2) = 20-16 = 4 (owner excluded),
//   [2,4) = 8 + 16 = 24 -> [2,4) (owner outside). Coldest first: rank 3 takes 16, rank 2 takes
//   min(8, 12) = 8; moved 24. q = [40-24, 0, 8, 16]. L = [24,16,20,20].
// Pass 2: owner 0 (24 > T); candidate e1, mass 8, give = min(4, 8) = 4; need = 1 -> level 1.
//   [0,2) room 4, [2,4) room 0 -> [0,2) (owner inside). Rank 1 takes 4. q = [4,4,0,0].
//   L = [20,20,20,20]. Pass 3: nobody above T.
// Coloring (level 1 only, plan order): b0 on [2,4) -> h 0; b1 on [0,2) -> h 0.
// Repair: no pair of ranks hosts two common broadcasts, so no trade (a trade needs a pull on
//   one broadcast and a give on another).
// Transport: b0 owner outside -> SAMI; b1 owner inside, [0,2) met only by b1 -> pure ->
//   owner-direct.
const CountMatrix& case_a_counts() {
  static const CountMatrix counts = make_counts({{10, 2, 3, 2, 2, 1, 1, 0},
                                                 {10, 2, 3, 2, 2, 1, 0, 1},
                                                 {10, 2, 2, 1, 2, 1, 1, 0},
                                                 {10, 2, 2, 1, 2, 1, 0, 1}});
  return counts;
}

TEST(HaloQGolden, CaseAOwnerOutsideAndInside) {
  const auto topo = Topology::make(4, 8, 2, 2);
  const Plan plan = plan_halo_q(topo, case_a_counts());
  EXPECT_EQ(plan.target, 20);
  EXPECT_EQ(plan.loads, (std::vector<int32_t>{20, 20, 20, 20}));
  EXPECT_FALSE(plan.owner_uses_home_slot);
  ASSERT_EQ(plan.broadcasts.size(), 2u);
  EXPECT_EQ(plan.broadcasts[0], make_broadcast(0, 0, 1, 2, 2, 0, kSami, {16, 0, 8, 16}));
  EXPECT_EQ(plan.broadcasts[1], make_broadcast(1, 0, 1, 0, 2, 0, kDirect, {4, 4, 0, 0}));
  EXPECT_TRUE(
      validate_plan(
          topo, case_a_counts(), plan,
          {.require_aligned_groups = true, .max_exports_per_owner = -1, .unique_experts = true})
          .empty());
}

// North-west corner of e0: q = [16,0,8,16], c = [10,10,10,10]. diag = [10,0,8,10]; residual
//   supply [0,10,2,0], demand [6,0,0,6]. Source 1 sends 6 to rank 0, then 4 to rank 3; source
//   2 sends 2 to rank 3.
// e1: q = [4,4,0,0], c = [2,2,2,2]: diag [2,2,0,0]; source 2 -> rank 0 (2), source 3 -> rank 1.
TEST(HaloQGolden, CaseANorthWestCornerFlows) {
  const auto topo = Topology::make(4, 8, 2, 2);
  const Plan plan = plan_halo_q(topo, case_a_counts());
  std::vector<RouteFlow> e0;
  std::vector<RouteFlow> e1;
  for (const RouteFlow& f : rewrite_flows(topo, case_a_counts(), plan)) {
    if (f.expert == 0) e0.push_back(f);
    if (f.expert == 1) e1.push_back(f);
  }
  EXPECT_EQ(
      e0,
      (std::vector<RouteFlow>{
          {0, 0, 0, 10}, {1, 0, 0, 6}, {1, 0, 3, 4}, {2, 0, 2, 8}, {2, 0, 3, 2}, {3, 0, 3, 10}}));
  EXPECT_EQ(e1, (std::vector<RouteFlow>{{0, 1, 0, 2}, {1, 1, 1, 2}, {2, 1, 0, 2}, {3, 1, 1, 2}}));
}

// Tokens of rank 1 for e0 (10 routes) and rank 2 for e0 (10) and e1 (2). H + S = 4.
//   Rank 1, e0: ordinals to d < 1 first: rank 0 takes 6 -> owner 0 is outside [2,4): home slot
//   0; no diag; then rank 3 takes 4 -> helper h0 of rank 3 = 3·4 + 2 = 14.
//   Rank 2, e0: no d < 2; itself 8 -> 2·4 + 2 = 10; then rank 3 takes 2 -> 14.
//   Rank 2, e1: d = 0 takes 2 -> owner 0 inside [0,2) uses its helper slot 0·4 + 2 = 2 (the
//   reference) or its home slot 1 (owner-home).
TEST(HaloQGolden, CaseATokenOrdinals) {
  const auto topo = Topology::make(4, 8, 2, 2);
  const CountMatrix& counts = case_a_counts();
  // Rank 1 routes as [token, k] with k = 1 in count order: e0 ×10, e1 ×2, e2 ×3, e3 ×2, e4 ×2,
  // e5, e7 (its row).
  auto tokens_of = [&](int s) {
    std::vector<int32_t> ids;
    for (int e = 0; e < 8; ++e) ids.insert(ids.end(), counts.at(s, e), e);
    return ids;
  };
  for (const bool owner_home : {false, true}) {
    HaloQOptions options;
    options.owner_home = owner_home;
    const Plan plan = plan_halo_q(topo, counts, options);
    const auto t1 = tokens_of(1);
    std::vector<int32_t> s1(t1.size());
    rewrite_tokens(topo, counts, plan, 1, t1, 1, s1);
    EXPECT_EQ(std::vector<int32_t>(s1.begin(), s1.begin() + 10),
              (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 14, 14, 14, 14}));
    const auto t2 = tokens_of(2);
    std::vector<int32_t> s2(t2.size());
    rewrite_tokens(topo, counts, plan, 2, t2, 1, s2);
    EXPECT_EQ(std::vector<int32_t>(s2.begin(), s2.begin() + 12),
              (std::vector<int32_t>{10, 10, 10, 10, 10, 10, 10, 10, 14, 14, owner_home ? 1 : 2,
                                    owner_home ? 1 : 2}));
    // e2 (owner 1, no broadcast) stays in its home slot 1·4 + 0 = 4.
    EXPECT_EQ(s2[12], 4);
  }
}

// ---- Case B: a freeze (no eligible group) -----------------------------------------------------
// P = 4, E = 8, S = 1, g_min = 2: levels 0 (4) and 1 (2); C = 1.
//   hist = [30,2,20,2,2,2,1,1], L = [32,22,4,2], total 60, T = 15.
// Pass 1: owner 0, e0, mass 30, give 17, need 2 -> level 1: [0,2) room max(0, 15-22) = 0,
//   [2,4) room 11 + 13 = 24 -> [2,4). Rank 3 takes 13, rank 2 min(11, 4) = 4. q = [13,0,4,13].
//   L = [15,22,8,15]; ranks 2, 3 have used their only slot.
// Pass 2: owner 1 (22), e2, mass 20, give 7, need 2 -> level 1: [0,2) room 15-15 = 0; [2,4)
//   ineligible; level 0 ineligible (ranks 2, 3 full) -> freeze rank 1.
// Pass 3: nobody else above T (rank 0 is at 15). Final L = [15,22,8,15].
TEST(HaloQGolden, CaseBFreezeWhenNoGroupIsEligible) {
  const auto topo = Topology::make(4, 8, 1, 2);
  const CountMatrix counts = spread_counts(4, {30, 2, 20, 2, 2, 2, 1, 1});
  const Plan plan = plan_halo_q(topo, counts);
  EXPECT_EQ(plan.target, 15);
  EXPECT_EQ(plan.loads, (std::vector<int32_t>{15, 22, 8, 15}));
  ASSERT_EQ(plan.broadcasts.size(), 1u);
  // One broadcast: repair is skipped. e0 counts are 8/8/7/7; quotas stay as placed.
  EXPECT_EQ(plan.broadcasts[0], make_broadcast(0, 0, 1, 2, 2, 0, kSami, {13, 0, 4, 13}));
}

// ---- Case C: partial move, zero-mass freeze, coloring across levels ---------------------------
// P = 8, E = 16 (H = 2), S = 2, g_min = 2: levels 0 (8), 1 (4), 2 (2); C = 2.
//   hist = [30,20 | 45,0 | 10,5 | 15,0 | 10,0 | 5,5 | 10,0 | 5,0] (by owner),
//   L = [50,45,15,15,10,10,10,5], total 160, T = 20.
// Pass 1: owner 0, e0 mass 30, give min(30, 30) = 30, need 2 -> level 2 (size 2). Rooms:
//   [0,2) 0, [2,4) 10, [4,6) 20, [6,8) 25 -> [6,8). Rank 7 takes 15, rank 6 takes 10: moved
//   25 < give (partial move). q = [5,0,0,0,0,0,10,15]. L = [25,45,15,15,10,10,20,20].
// Pass 2: owner 1 (45), e2 mass 45, give 25, need 3 -> level 1 (size 4). Rooms: [0,4) =
//   0 + 5 + 5 = 10 (owner 1 excluded), [4,8) = 10 + 10 = 20 -> [4,8). Ranks 4, 5 take 10 each,
//   rank 6 is at T. q = [0,25,0,0,10,10,0,0]. L = [25,25,15,15,20,20,20,20].
// Pass 3: owners 0 and 1 tie at 25 -> rank 0; e1 mass 20, give 5, need 1 -> level 2. Rooms:
//   [0,2) 0, [2,4) 10, [4,6) 0, [6,8) ineligible (2 slots used) -> [2,4). Ranks 2 and 3 tie at
//   15 -> rank 2 takes 5. q = [15,0,5,0,...]. L = [20,25,20,15,20,20,20,20].
// Pass 4: owner 1, e3 has mass 0 -> freeze rank 1. Pass 5: nobody left above T.
// Coloring: level 1 first: b1 on [4,8) -> h 0. Level 2 in plan order: b0 on [6,8) sees {0}
//   -> h 1; b2 on [2,4) -> h 0.
// Repair: only ranks 6 and 7 share two broadcasts (b0, b1). Counts spread evenly: c[6..7][e0]
//   = 3, c[6..7][e2] = 5. Receiver 6 / donor 7: pull(b0) = min(max(0, 3-10), ...) = 0,
//   pull(b1) = min(5, max(0, 0-5)) = 0 -> no trade; symmetric for 7 / 6.
// Transport: every owner is outside its group -> SAMI.
TEST(HaloQGolden, CaseCPartialMoveFreezeAndColoringAcrossLevels) {
  const auto topo = Topology::make(8, 16, 2, 2);
  const CountMatrix counts =
      spread_counts(8, {30, 20, 45, 0, 10, 5, 15, 0, 10, 0, 5, 5, 10, 0, 5, 0});
  const Plan plan = plan_halo_q(topo, counts);
  EXPECT_EQ(plan.target, 20);
  EXPECT_EQ(plan.loads, (std::vector<int32_t>{20, 25, 20, 15, 20, 20, 20, 20}));
  ASSERT_EQ(plan.broadcasts.size(), 3u);
  EXPECT_EQ(plan.broadcasts[0],
            make_broadcast(0, 0, 2, 6, 2, 1, kSami, {5, 0, 0, 0, 0, 0, 10, 15}));
  EXPECT_EQ(plan.broadcasts[1],
            make_broadcast(2, 1, 1, 4, 4, 0, kSami, {0, 25, 0, 0, 10, 10, 0, 0}));
  EXPECT_EQ(plan.broadcasts[2], make_broadcast(1, 0, 2, 2, 2, 0, kSami, {15, 0, 5, 0, 0, 0, 0, 0}));
}

// absorb on case C, pass 1: level 2's best room 25 < give 30, so level 1 is tried: [4,8) has
//   room 10 + 10 + 10 + 15 = 45 >= 30 -> accepted. Coldest first: rank 7 (5) takes 15, then
//   ranks 4, 5, 6 tie at 10: rank 4 takes 10, rank 5 the last 5. q[0] = 30 - 30 = 0.
TEST(HaloQGolden, CaseCAbsorbPrefersACoarserGroupThatAbsorbsGive) {
  const auto topo = Topology::make(8, 16, 2, 2);
  const CountMatrix counts =
      spread_counts(8, {30, 20, 45, 0, 10, 5, 15, 0, 10, 0, 5, 5, 10, 0, 5, 0});
  HaloQOptions options;
  options.absorb = true;
  PlannerWorkspace ws;
  Plan plan;
  place_broadcasts(topo, counts, options, ws, plan);
  ASSERT_GE(plan.broadcasts.size(), 1u);
  const Broadcast& b0 = plan.broadcasts[0];
  EXPECT_EQ(b0.level, 1);
  EXPECT_EQ(b0.group_begin, 4);
  EXPECT_EQ(b0.quota, (std::vector<int32_t>{0, 0, 0, 0, 10, 5, 0, 15}));
}

// ---- Case D: quota repair trades --------------------------------------------------------------
// P = 4, E = 8, S = 2, g_min = 4: one level (size 4); C = 2.
//   c[·][e0] = [8,6,0,10], c[·][e1] = [2,4,10,0], e2 = [1,1,1,1], e4 = [2,2,2,2],
//   e6 = [1,1,1,1]; hist = [24,16,4,0,8,0,4,0], L = [40,4,8,4], total 56, T = 14.
// Placement: owner 0, e0 (24), give 24 -> level 0 room 10 + 6 + 10 = 26: ranks 1 and 3 (tie at
//   4, rank 1 first) take 10 each, rank 2 takes 4: q0 = [0,10,4,10]; L = [16,14,12,14].
//   Owner 0 again, e1 (16), give 2 -> room 2 (rank 2): q1 = [14,0,2,0]; all loads 14.
// Coloring: b0 h 0, b1 h 1. Transport: [0,4) is pure -> both owner-direct.
// Repair (order e0, e1; ring [1,2,3]; phases: (0,1)(2,3) | (0,3)(1,2) | (0,2)(3,1), twice):
//   (0,1) receiver 0: pull(e0) = min(8-0, 10-6) = 4, give(e1) = 14-2 = 12 -> Δ 4:
//     q0 = [4,6,4,10], q1 = [10,4,2,0]. Receiver 1: nothing to pull.
//   (2,3), (0,3), (1,2): no pull meets a give.
//   (0,2) receiver 0: pull(e0) = min(8-4, 4-0) = 4, give(e1) = 10-2 = 8 -> Δ 4:
//     q0 = [8,6,0,10], q1 = [6,4,6,0]. Receiver 2: pull(e1) = 4 but no give -> Δ 0.
//   Round 2 finds no further trade. Loads stay 14 everywhere.
TEST(HaloQGolden, CaseDRepairTrade) {
  const auto topo = Topology::make(4, 8, 2, 4);
  const CountMatrix counts = make_counts({{8, 2, 1, 0, 2, 0, 1, 0},
                                          {6, 4, 1, 0, 2, 0, 1, 0},
                                          {0, 10, 1, 0, 2, 0, 1, 0},
                                          {10, 0, 1, 0, 2, 0, 1, 0}});
  PlannerWorkspace ws;
  Plan placed;
  place_broadcasts(topo, counts, {}, ws, placed);
  ASSERT_EQ(placed.broadcasts.size(), 2u);
  EXPECT_EQ(placed.broadcasts[0].quota, (std::vector<int32_t>{0, 10, 4, 10}));
  EXPECT_EQ(placed.broadcasts[1].quota, (std::vector<int32_t>{14, 0, 2, 0}));

  const Plan plan = plan_halo_q(topo, counts);
  EXPECT_EQ(plan.loads, (std::vector<int32_t>{14, 14, 14, 14}));
  ASSERT_EQ(plan.broadcasts.size(), 2u);
  EXPECT_EQ(plan.broadcasts[0], make_broadcast(0, 0, 0, 0, 4, 0, kDirect, {8, 6, 0, 10}));
  EXPECT_EQ(plan.broadcasts[1], make_broadcast(1, 0, 0, 0, 4, 1, kDirect, {6, 4, 6, 0}));

  // Rewrite of e1 on rank 2: residual 4 routes go to rank 0 (d < 2) in its helper slot h1:
  //   0·4 + 2 + 1 = 3; its own 6 stay in its helper slot 2·4 + 3 = 11.
  //   Rank 2's routes, k = 1: e1 ×10, then e2, e4 ×2, e6 (home slots 4, 8, 12).
  const std::vector<int32_t> ids = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 4, 6};
  std::vector<int32_t> slots(ids.size());
  rewrite_tokens(topo, counts, plan, 2, ids, 1, slots);
  EXPECT_EQ(slots, (std::vector<int32_t>{3, 3, 3, 3, 11, 11, 11, 11, 11, 11, 4, 8, 8, 12}));
}

// ---- Odd P: the bye seat ---------------------------------------------------------------------
// P = 3, E = 3 (H = 1), S = 2, one level. Hand-made plan: b0 = e0 (owner 0), b1 = e1 (owner 1),
// both on [0,3); q0 = [0,5,5], q1 = [5,0,5]; c[·][e0] = [0,0,10], c[·][e1] = [0,10,0].
// Seats 4 (seat 3 = bye), ring [1,2,3]: phases (0,1)(2,bye) | (0,bye)(1,2) | (0,2)(bye,1).
//   (0,1) receiver 0: no pull. Receiver 1: pull(e1) = min(10-0, 5-0) = 5, give(e0) = 5-0 = 5
//     -> q0 = [5,0,5], q1 = [0,5,5].
//   (1,2): receiver 1: pull(e1) = min(5, 5-0) = 5 but give 0. Receiver 2: pull(e0) =
//     min(10-5, 0-0) = 0.
//   (0,2): receiver 0: no pull. Receiver 2: pull(e0) = min(10-5, 5-0) = 5, give(e1) = 5 ->
//     q0 = [0,0,10], q1 = [5,5,0].
//   Round 2: no further trade.
TEST(HaloQGolden, OddRanksUseAByeSeat) {
  const auto topo = Topology::make(3, 3, 2);
  const CountMatrix counts = make_counts({{0, 0, 0}, {0, 10, 0}, {10, 0, 0}});
  Plan plan = make_empty_plan(topo, counts);
  plan.broadcasts.push_back(make_broadcast(0, 0, 0, 0, 3, 0, kDirect, {0, 5, 5}));
  plan.broadcasts.push_back(make_broadcast(1, 1, 0, 0, 3, 1, kDirect, {5, 0, 5}));
  PlannerWorkspace ws;
  repair_quotas(topo, counts, plan, ws);
  EXPECT_EQ(plan.broadcasts[0].quota, (std::vector<int32_t>{0, 0, 10}));
  EXPECT_EQ(plan.broadcasts[1].quota, (std::vector<int32_t>{5, 5, 0}));
}

}  // namespace
}  // namespace iser

namespace iser {
namespace {

// ---- iser on case A ---------------------------------------------------------------------------
// P = 4, E = 8, S = 2, g_min = 2; hist = [40,8,10,6,8,4,2,2], L = [48,16,12,4], T = 20.
// Room-aware placement (water level 20):
//   Owner 0; its largest remaining share is e0 (40); give = min(28, 40) = 28.
//   Level 1 (size 2): [0,2) room 4 (rank 1; owner 0 is above T), [2,4) room 8 + 16 = 24 ->
//   absorbs 24. Level 0: room 28 -> absorbs 28 = the best. Finest level absorbing >= 7/8 of 28
//   (24·8 = 192 < 196; 28·8 = 224): level 0, group [0,4).
//   Coldest first: rank 3 takes 16, rank 2 takes 8, rank 1 takes 4; moved 28.
//   q = [40 − 28, 4, 8, 16] = [12,4,8,16]; all loads 20.
// HALO-Q's placement (golden case A) also ends at max load 20 with 2 + 1 = 3 remote copies;
// the room-aware one has 3 (owner inside [0,4)): a tie, so the earlier candidate (room-aware)
// is kept. Max load 20 <= T + T/64, so no third candidate.
// Coloring: h 0. Repair: one broadcast, skipped. Transport: owner inside, [0,4) pure ->
// owner-direct. The owner serves from its home slot (owner_uses_home_slot).
// Rewrite of e0 (c = [10,10,10,10]): diag [10,4,8,10]; source 1 sends 2 to rank 0 and 4 to
// rank 3; source 2 sends 2 to rank 3. Rank 1's ten routes: 2 to rank 0's home slot 0, its own 4
// to helper slot 1·4 + 2 = 6, then 4 to rank 3's helper slot 3·4 + 2 = 14.
TEST(IserGolden, CaseARoomAwareLevelChoice) {
  const auto topo = Topology::make(4, 8, 2, 2);
  const Plan plan = plan_iser(topo, case_a_counts());
  EXPECT_EQ(plan.target, 20);
  EXPECT_TRUE(plan.owner_uses_home_slot);
  EXPECT_EQ(plan.loads, (std::vector<int32_t>{20, 20, 20, 20}));
  ASSERT_EQ(plan.broadcasts.size(), 1u);
  EXPECT_EQ(plan.broadcasts[0], make_broadcast(0, 0, 0, 0, 4, 0, kDirect, {12, 4, 8, 16}));
  std::vector<int32_t> ids;
  for (int e = 0; e < 8; ++e) ids.insert(ids.end(), case_a_counts().at(1, e), e);
  std::vector<int32_t> slots(ids.size());
  rewrite_tokens(topo, case_a_counts(), plan, 1, ids, 1, slots);
  EXPECT_EQ(std::vector<int32_t>(slots.begin(), slots.begin() + 10),
            (std::vector<int32_t>{0, 0, 6, 6, 6, 6, 14, 14, 14, 14}));
}

// ---- iser: a very hot expert exported to two disjoint groups ---------------------------------
// P = 8, E = 8 (H = 1), S = 1, g_min = 4: levels 0 (8) and 1 (4). Rank 0 owns e0 with 60
// routes; ranks 1..7 own 4 each (e1..e7): total 88, T = 11.
// Room-aware placement (water level 11):
//   Owner 0, e0, give = min(49, 60) = 49. Level 1: [0,4) room 3·7 = 21, [4,8) room 4·7 = 28
//   (absorbs 28); level 0: room 49 (absorbs 49 = the best). 28·8 < 49·7, so level 0: all
//   seven others take 7 each; moved 49; q = [11,7,7,7,7,7,7,7]. Every rank is at 11 and has
//   used its only slot. One broadcast; nothing else above T.
TEST(IserGolden, VeryHotExpertUsesTheWholeDomainWhenItMust) {
  const auto topo = Topology::make(8, 8, 1, 4);
  CountMatrix counts(8, 8);
  counts.at(0, 0) = 60;
  for (int r = 1; r < 8; ++r) counts.at(r, r) = 4;
  const Plan plan = plan_iser(topo, counts);
  EXPECT_EQ(plan.target, 11);
  ASSERT_EQ(plan.broadcasts.size(), 1u);
  EXPECT_EQ(plan.broadcasts[0].level, 0);
  EXPECT_EQ(plan.broadcasts[0].quota, (std::vector<int32_t>{11, 7, 7, 7, 7, 7, 7, 7}));
  EXPECT_EQ(plan.loads, std::vector<int32_t>(8, 11));
}

// P = 8, E = 16 (H = 2), S = 2, g_min = 4: levels 0 (8) and 1 (4).
// Rank 0: e0 = 40, e1 = 0. Rank 4: e8 = 16, e9 = 0 (a second hot owner). Others: 4 each on their
// first expert (ranks 1,2,3,5,6,7). Total 80, T = 10.
// Pass 1: owner 0 (40), e0 share 40, give 30. Level 1: [0,4) room 3·6 = 18; [4,8): rank 4 is
//   hot (16), ranks 5..7 room 6 each = 18; tie at 18 -> fewer cold members? both 3 -> lowest
//   first rank [0,4). Level 0: room 36 -> absorbs 30 = best. 18·8 = 144 < 210 -> level 0.
//   Coldest first (all others at 4 except rank 4 at 16): ranks 1,2,3,5,6 take 6 each = 30.
//   q = [10,6,6,6,0,6,6,0]. L = [10,10,10,10,16,10,10,4]. Level 0 used once on every rank.
// Pass 2: owner 4 (16), e8 share 16, give 6. Level 1: [0,4) room 0; [4,8) room 6 (rank 7) ->
//   absorbs 6; level 0: room 6. Best 6; finest: level 1 [4,8). Rank 7 takes 6.
//   q = [0,0,0,0,10,0,0,6]. All at 10.
// The reference cannot do better (max 10 = T); its placement: owner 0, e0 mass 40, need 4 ->
//   level 1 ([4,8) room 18 vs [0,4) 18: tie -> [0,4)), moved 18 -> L0 = 22; then owner 0 e1
//   (mass 0) -> freeze... max stays 22 > 10, so iser's placement is kept.
TEST(IserGolden, RoomAwarePlacementBeatsNeedBasedLevels) {
  const auto topo = Topology::make(8, 16, 2, 4);
  CountMatrix counts(8, 16);
  counts.at(0, 0) = 40;
  counts.at(4, 8) = 16;
  for (const int r : {1, 2, 3, 5, 6, 7}) counts.at(r, 2 * r) = 4;
  const Plan plan = plan_iser(topo, counts);
  EXPECT_EQ(plan.target, 10);
  EXPECT_EQ(plan.loads, std::vector<int32_t>(8, 10));
  ASSERT_EQ(plan.broadcasts.size(), 2u);
  EXPECT_EQ(plan.broadcasts[0].expert, 0);
  EXPECT_EQ(plan.broadcasts[0].level, 0);
  EXPECT_EQ(plan.broadcasts[1].expert, 8);
  EXPECT_EQ(plan.broadcasts[1].level, 1);
  EXPECT_EQ(plan.broadcasts[1].group_begin, 4);
  const Plan reference = plan_halo_q(topo, counts);
  EXPECT_EQ(*std::max_element(reference.loads.begin(), reference.loads.end()), 22);
}

// ---- iser: leveling hands the owner's leftover to a colder member --------------------------
// P = 4, E = 8 (H = 2), S = 1, g_min = 2: levels 0 (4) and 1 (2). Rank 0 owns e0 = 20 and
// e1 = 20; ranks 1, 2, 3 own 4 each (e2, e4, e6). Total 52, T = 13.
// Room-aware placement (water level 13): owner 0, e0 (share 20; ties to the smaller id), give =
//   min(27, 20) = 20. Level 1: [0,2) room 9 (rank 1), [2,4) room 18 -> absorbs 18; level 0: room
//   27 -> absorbs 20 = the best. 18·8 = 144 >= 140, so level 1, [2,4): ranks 2 and 3 take 9 each;
//   q = [2,0,9,9], L = [22,4,13,13]. Owner 0 has used its only export: frozen at 22.
// Leveling: h = 0 (22) holds q[0] = 2 in broadcast 0 (its latest); the least loaded other host
//   is rank 2 (13; ties to the lower rank): gap 9, moved min(2, 4) = 2 -> q = [0,0,11,9], L =
//   [20,4,15,13]. h = 0 holds no quota any more: done. Max 20 (22 before leveling).
// HALO-Q's placement (e0, need 2 -> level 1, [2,4) has the most room) is the same plan, leveled
//   the same: a tie, the earlier candidate kept. The ladder's water levels are all 13 + 13/d = 13.
// Max 20 is the optimum: e1 (20) stays on rank 0 with its one export spent on e0.
TEST(IserGolden, LevelingHandsTheOwnersLeftoverToAColderMember) {
  const auto topo = Topology::make(4, 8, 1, 2);
  CountMatrix counts(4, 8);
  counts.at(0, 0) = 20;
  counts.at(0, 1) = 20;
  counts.at(1, 2) = 4;
  counts.at(2, 4) = 4;
  counts.at(3, 6) = 4;
  const Plan plan = plan_iser(topo, counts);
  EXPECT_EQ(plan.target, 13);
  EXPECT_EQ(plan.loads, (std::vector<int32_t>{20, 4, 15, 13}));
  ASSERT_EQ(plan.broadcasts.size(), 1u);
  const Broadcast& b = plan.broadcasts[0];
  EXPECT_EQ(b.expert, 0);
  EXPECT_EQ(b.owner, 0);
  EXPECT_EQ(b.level, 1);
  EXPECT_EQ(b.group_begin, 2);
  EXPECT_EQ(b.quota, (std::vector<int32_t>{0, 0, 11, 9}));
  ValidationOptions v;
  v.max_exports_per_owner = topo.num_slots;
  v.unique_experts = false;
  EXPECT_TRUE(validate_plan(topo, counts, plan, v).empty());
  const Plan reference = plan_halo_q(topo, counts);
  EXPECT_EQ(*std::max_element(reference.loads.begin(), reference.loads.end()), 22);
}

}  // namespace
}  // namespace iser
