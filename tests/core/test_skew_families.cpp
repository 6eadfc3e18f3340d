// The skew families (src/core/trace/synthetic_families.cpp): shapes, determinism and the
// statistics docs/evaluation.md states for each family, on seeded draws.
#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "core/trace/synthetic_families.h"
#include "iser/trace.h"
#include "trace_test_util.h"

namespace iser {
namespace {

using testing::expect_error;

constexpr int kE = 256;
constexpr int kK = 8;
constexpr int kTau = 2048;

std::unique_ptr<RoutingSource> family(const std::string& kind, uint64_t seed = 7) {
  SyntheticOptions o;
  o.kind = kind;
  o.num_experts = kE;
  o.top_k = kK;
  o.num_layers = 4;
  o.seed = seed;
  return make_synthetic(o);
}

std::vector<int64_t> rank_loads(const CountMatrix& c, int P) {
  const auto hist = c.histogram();
  std::vector<int64_t> loads(P, 0);
  for (int e = 0; e < kE; ++e) loads[e / (kE / P)] += hist[e];
  return loads;
}

double imbalance(const CountMatrix& c, int P) {
  const auto loads = rank_loads(c, P);
  const int64_t total = std::accumulate(loads.begin(), loads.end(), int64_t{0});
  return static_cast<double>(*std::max_element(loads.begin(), loads.end())) * P / total;
}

// Experts sorted hottest first (ties: smaller id).
std::vector<int> by_heat(const CountMatrix& c) {
  const auto hist = c.histogram();
  std::vector<int> order(kE);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return hist[a] > hist[b]; });
  return order;
}

TEST(SkewFamilies, EveryFamilyHasFullRowsAndIsDeterministic) {
  for (const std::string& kind : trace::skew_family_names()) {
    SCOPED_TRACE(kind);
    const auto a = family(kind);
    const auto b = family(kind);
    const CountMatrix c = a->counts(1, 3, 16, kTau);
    EXPECT_EQ(c, b->counts(1, 3, 16, kTau));
    EXPECT_NE(c, family(kind, 8)->counts(1, 3, 16, kTau));
    // tokens() draws the same routes as counts().
    EXPECT_EQ(CountMatrix::from_topk(a->tokens(1, 3, 16, kTau), 16, kTau, kK, kE), c);
    int full = 0;
    for (int r = 0; r < 16; ++r) {
      const auto row = c.row(r);
      const int64_t routes = std::accumulate(row.begin(), row.end(), int64_t{0});
      if (kind == "rank-skew") {
        EXPECT_TRUE(routes == int64_t{kTau} * kK || routes == int64_t{kTau / 2} * kK) << routes;
      } else {
        EXPECT_EQ(routes, int64_t{kTau} * kK);
      }
      full += routes == int64_t{kTau} * kK ? 1 : 0;
    }
    EXPECT_EQ(full, kind == "rank-skew" ? 4 : 16);
  }
}

TEST(SkewFamilies, ZipfImbalanceGrowsWithTheExponent) {
  // Seed 7, EP16, tau 2048, top-8, E 256: whole-matrix R of layer 0, iteration 0.
  const double r06 = imbalance(family("zipf-0.6")->counts(0, 0, 16, kTau), 16);
  const double r10 = imbalance(family("zipf-1.0")->counts(0, 0, 16, kTau), 16);
  const double r15 = imbalance(family("zipf-1.5")->counts(0, 0, 16, kTau), 16);
  EXPECT_GT(r06, 1.05);
  EXPECT_LT(r06, r10);
  EXPECT_LT(r10, r15);
  // zipf-1.0 is the same distribution under another name for the fixed families' base.
  EXPECT_EQ(family("zipf-1")->counts(0, 0, 16, kTau), family("zipf-1.0")->counts(0, 0, 16, kTau));
}

TEST(SkewFamilies, HotRanksConcentrateAndHotSpreadSpreads) {
  constexpr int P = 32;  // hot-ranks: c = P / 16 = 2 hot ranks, two hot experts each
  const CountMatrix hot = family("hot-ranks")->counts(0, 0, P, kTau);
  const auto order = by_heat(hot);
  std::vector<int> owners;
  for (int i = 0; i < 4; ++i) owners.push_back(order[i] / (kE / P));
  std::sort(owners.begin(), owners.end());
  EXPECT_EQ(owners[0], owners[1]);
  EXPECT_EQ(owners[2], owners[3]);
  EXPECT_NE(owners[1], owners[2]);

  const CountMatrix spread = family("hot-spread")->counts(0, 0, P, kTau);
  const auto spread_order = by_heat(spread);
  std::vector<int> spread_owners;
  for (int i = 0; i < 8; ++i) spread_owners.push_back(spread_order[i] / (kE / P));
  std::sort(spread_owners.begin(), spread_owners.end());
  EXPECT_EQ(std::adjacent_find(spread_owners.begin(), spread_owners.end()), spread_owners.end());
  EXPECT_GT(imbalance(hot, P), imbalance(spread, P));
}

TEST(SkewFamilies, DriftMovesTheHotSetBetweenIterations) {
  const auto src = family("drift");
  const auto top = [&](int64_t it) {
    auto order = by_heat(src->counts(0, it, 16, kTau));
    order.resize(kK);
    std::sort(order.begin(), order.end());
    return order;
  };
  const auto first = top(0);
  EXPECT_NE(first, top(20));
  // Iteration 0 is plain zipf-1.0 over the layer's order (same popularity order).
  EXPECT_EQ(by_heat(src->counts(0, 0, 16, kTau))[0],
            by_heat(family("zipf-1.0")->counts(0, 0, 16, kTau))[0]);
}

TEST(SkewFamilies, LayerCorrelatedSharesTheHottestExpert) {
  const auto corr = family("layer-correlated");
  const auto zipf = family("zipf-1.0");
  const int hottest = by_heat(corr->counts(0, 0, 16, kTau))[0];
  for (int layer = 1; layer < 4; ++layer) {
    EXPECT_EQ(by_heat(corr->counts(layer, 0, 16, kTau))[0], hottest) << layer;
  }
  // Independent layers: zipf-1.0's hottest experts differ somewhere across 4 layers.
  std::vector<int> zipf_hottest;
  for (int layer = 0; layer < 4; ++layer) {
    zipf_hottest.push_back(by_heat(zipf->counts(layer, 0, 16, kTau))[0]);
  }
  EXPECT_NE(std::count(zipf_hottest.begin(), zipf_hottest.end(), zipf_hottest[0]), 4);
}

TEST(SkewFamilies, BadNamesAreClearErrors) {
  expect_error([] { family("zipf-abc"); }, {"zipf-abc", "(0, 4]"});
  expect_error([] { family("zipf-9"); }, {"zipf-9"});
  expect_error([] { family("hot"); }, {"unknown kind 'hot'", "hot-ranks", "layer-correlated"});
  expect_error([] { family("hot-ranks")->counts(0, 0, 3, kTau); }, {"P = 3", "E = 256"});
}

}  // namespace
}  // namespace iser
