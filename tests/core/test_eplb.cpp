#include <gtest/gtest.h>

#include <limits>

#include "iser/eplb.h"
#include "iser/error.h"

namespace iser {
namespace {

std::vector<int32_t> row(const std::vector<int32_t>& v, int row_idx, int width) {
  return {v.begin() + static_cast<ptrdiff_t>(row_idx) * width,
          v.begin() + static_cast<ptrdiff_t>(row_idx + 1) * width};
}

const std::vector<double> kReadmeWeight = {
    90, 132, 40,  61, 104, 165, 39,  4,   73,  56, 183, 86,  // layer 0
    20, 107, 104, 64, 19,  197, 187, 157, 172, 86, 16,  27   // layer 1
};

TEST(Eplb, ReadmeExample) {
  // DeepSeek's README: 2 layers, 12 experts, 16 replicas, 4 groups, 2 nodes, 8 GPUs.
  const auto out = eplb_rebalance(kReadmeWeight, 2, 12, {16, 4, 2, 8});
  EXPECT_EQ(row(out.phy2log, 0, 16),
            (std::vector<int32_t>{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1}));
  EXPECT_EQ(row(out.phy2log, 1, 16),
            (std::vector<int32_t>{7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}));
  EXPECT_EQ(row(out.logcnt, 0, 12), (std::vector<int32_t>{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1}));
  EXPECT_EQ(row(out.logcnt, 1, 12), (std::vector<int32_t>{1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1}));
  ASSERT_EQ(out.max_replica_count, 2);
  // Layer 0's log2phy, derived by hand from the three stages (replica 0 is the original copy,
  // replica 1 the redundant one; the stable sort packs the original first).
  EXPECT_EQ(row(out.log2phy, 0, 24),
            (std::vector<int32_t>{12, -1, 15, 13, 11, -1, 6, -1, 7, 5,  0,  2,
                                  1,  -1, 3,  -1, 4,  -1, 9, -1, 8, 10, 14, -1}));
}

TEST(Eplb, Log2PhyInvertsPhy2Log) {
  const auto out = eplb_rebalance(kReadmeWeight, 2, 12, {24, 4, 2, 8});
  ASSERT_EQ(out.num_replicas, 24);
  for (int l = 0; l < 2; ++l) {
    std::vector<int> seen(12, 0);
    for (int p = 0; p < 24; ++p) {
      const int e = out.phy_to_log(l, p);
      ASSERT_GE(e, 0);
      ASSERT_LT(e, 12);
      EXPECT_EQ(out.log_to_phy(l, e, out.phy_rank[l * 24 + p]), p);
      ++seen[e];
    }
    for (int e = 0; e < 12; ++e) {
      EXPECT_EQ(seen[e], out.log_count(l, e));
      for (int x = out.log_count(l, e); x < out.max_replica_count; ++x) {
        EXPECT_EQ(out.log_to_phy(l, e, x), -1);
      }
    }
  }
}

TEST(Eplb, GlobalPolicyWhenGroupsDoNotDivideNodes) {
  // 3 groups over 2 nodes: the reference falls back to one group on one node.
  const auto global = eplb_rebalance(kReadmeWeight, 2, 12, {16, 3, 2, 8});
  const auto flat = eplb_rebalance(kReadmeWeight, 2, 12, {16, 1, 1, 8});
  EXPECT_EQ(global.phy2log, flat.phy2log);
  EXPECT_EQ(global.log2phy, flat.log2phy);
  EXPECT_EQ(global.logcnt, flat.logcnt);
  // Hand check of layer 0 (global): redundant replicas go to 183 (e10), 165 (e5), 132 (e1) and
  // 104 (e4). Replica loads sorted (stable): p10 91.5, p12 91.5, p0 90, p11 86, p5 82.5,
  // p13 82.5, p8 73, p1 66, p14 66, p3 61, p9 56, p4 52, p15 52, p2 40, p6 39, p7 4 (p12..p15
  // are the redundant copies of e10, e5, e1, e4). The first eight open the eight GPUs; then
  // p14 -> g7 (66), p3 -> g6 (73), p9 -> g4 (82.5, first of two), p4 -> g5, p15 -> g3 (86),
  // p2 -> g2 (90), p6 -> g0 (91.5, first of two), p7 -> g1.
  EXPECT_EQ(row(flat.logcnt, 0, 12), (std::vector<int32_t>{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1}));
  EXPECT_EQ(row(flat.phy2log, 0, 16),
            (std::vector<int32_t>{10, 6, 10, 7, 0, 2, 11, 4, 5, 9, 5, 4, 8, 3, 1, 1}));
}

TEST(Eplb, BalancedPackingTiesGoToLowerIndex) {
  // Equal weights: sorted order is the index order; each item goes to the first lightest pack.
  const std::vector<float> w = {1, 1, 1, 1};
  const auto p = eplb_balanced_packing(w, 2);
  EXPECT_EQ(p.pack_index, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(p.rank_in_pack, (std::vector<int32_t>{0, 0, 1, 1}));
  // One item per pack is the identity, whatever the weights (the reference's short-cut).
  const std::vector<float> w2 = {1, 5, 3};
  const auto q = eplb_balanced_packing(w2, 3);
  EXPECT_EQ(q.pack_index, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(q.rank_in_pack, (std::vector<int32_t>{0, 0, 0}));
  // Greedy: 9 -> p0, 7 -> p1, 5 -> p1 (7 < 9), 2 -> p0 (p1 full).
  const std::vector<float> w3 = {2, 5, 9, 7};
  const auto r = eplb_balanced_packing(w3, 2);
  EXPECT_EQ(r.pack_index, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(r.rank_in_pack, (std::vector<int32_t>{1, 1, 0, 0}));
  EXPECT_THROW(eplb_balanced_packing(w3, 3), Error);
}

TEST(Eplb, ReplicateExpertsGivesEachReplicaToTheMaxLoadPerCopy) {
  // 12 / 1 > 8 > 12 / 2 = 6 = 6 (tie: expert 0 beats expert 2) ...
  const std::vector<float> w = {12, 8, 6};
  const auto rep = eplb_replicate_experts(w, 6);
  // +e0 (12), +e1 (8), +e0 (6 vs e2 6: lower index), then loads 4, 4, 6 -> +e2.
  EXPECT_EQ(rep.phy2log, (std::vector<int32_t>{0, 1, 2, 0, 1, 0}));
  EXPECT_EQ(rep.phy_rank, (std::vector<int32_t>{0, 0, 0, 1, 1, 2}));
  EXPECT_EQ(rep.logcnt, (std::vector<int32_t>{3, 2, 1}));
  EXPECT_THROW(eplb_replicate_experts(w, 2), Error);
}

TEST(Eplb, ZeroWeightsAreDeterministic) {
  const std::vector<double> w(8, 0.0);
  const auto out = eplb_rebalance(w, 1, 8, {12, 1, 1, 4});
  // Every load per replica is 0, so the first maximum is always expert 0: it takes all four
  // redundant replicas. Packing: every pack weighs 0, so the first open pack takes each item.
  EXPECT_EQ(out.logcnt, (std::vector<int32_t>{5, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(out.phy2log, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0}));
}

TEST(Eplb, RejectsBadShapesAndValues) {
  const auto expect_error = [](const std::vector<double>& w, int layers, int experts,
                               EplbConfig cfg, const std::string& needle) {
    try {
      eplb_rebalance(w, layers, experts, cfg);
      ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(kReadmeWeight, 2, 12, {18, 4, 2, 8}, "not a multiple of gpus");
  expect_error(kReadmeWeight, 2, 12, {8, 4, 2, 8}, "invalid replicas");
  expect_error(kReadmeWeight, 2, 12, {16, 5, 5, 8}, "not a multiple of groups");
  expect_error(kReadmeWeight, 2, 12, {16, 4, 4, 2}, "not a multiple of nodes");
  expect_error(kReadmeWeight, 2, 12, {16, 4, 2, 0}, "invalid gpus");
  expect_error(kReadmeWeight, 3, 12, {16, 4, 2, 8}, "expected layers x experts");
  auto negative = kReadmeWeight;
  negative[13] = -1;
  expect_error(negative, 2, 12, {16, 4, 2, 8}, "weight[1][1] = -1");
  auto inf = kReadmeWeight;
  inf[0] = std::numeric_limits<double>::infinity();
  expect_error(inf, 2, 12, {16, 4, 2, 8}, "weight[0][0]");
}

}  // namespace
}  // namespace iser
