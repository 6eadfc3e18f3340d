// Routing sources: the batching rule, the sampling rule (determinism, distinctness, the
// distribution), recorded per-iteration counts, and the synthetic generators.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "core/trace/sampler.h"
#include "core/trace/synthetic.h"
#include "iser/trace.h"
#include "trace_test_util.h"

namespace iser {
namespace {

using testing::expect_error;

// id of layer l, token t, choice c = (7l + 3t + c) mod E.
TraceData token_trace(int L, int T, int k, int E) {
  return testing::make_token_trace(L, T, k, E, [&](size_t i) {
    const auto l = static_cast<int>(i / (static_cast<size_t>(T) * k));
    const auto t = static_cast<int>(i / k % T);
    return static_cast<int32_t>((l * 7 + t * 3 + static_cast<int>(i % k)) % E);
  });
}

TraceData histograms(std::vector<int64_t> hist, int L, int k) {
  TraceData d;
  d.kind = TraceKind::kHistograms;
  d.metadata.num_experts = static_cast<int>(hist.size()) / L;
  d.metadata.top_k = k;
  d.metadata.num_layers = L;
  d.metadata.source = "hist";
  d.categories = {""};
  d.histograms = {std::move(hist)};
  return d;
}

TEST(Batching, IterationsTakeConsecutiveRankMajorTokens) {
  const auto data = token_trace(2, 11, 2, 16);
  const auto src = make_routing_source(data);
  EXPECT_EQ(src->num_iterations(2, 2), 2);  // 11 tokens / (2 ranks x 2 tokens)
  EXPECT_EQ(src->dropped_tokens(2, 2), 3);
  const auto ids = src->tokens(1, 1, 2, 2);
  // Layer 1, tokens [4, 8): rank 0 gets tokens 4, 5 and rank 1 gets tokens 6, 7.
  const std::vector<int32_t> expected(data.topk_ids.begin() + (11 + 4) * 2,
                                      data.topk_ids.begin() + (11 + 8) * 2);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(src->counts(1, 1, 2, 2), CountMatrix::from_topk(ids, 2, 2, 2, 16));
  EXPECT_EQ(src->tokens(1, 1, 2, 2), ids);  // deterministic
  expect_error([&] { src->tokens(0, 2, 2, 2); }, {"iteration 2 out of range", "11 tokens"});
  expect_error([&] { src->tokens(2, 0, 2, 2); }, {"layer 2 out of range"});
  expect_error([&] { src->tokens(0, -1, 2, 2); }, {"iteration -1"});
  expect_error([&] { src->tokens(0, 0, 0, 2); }, {"P = 0"});
}

TEST(Sampling, DeterministicBySeedAndIndependentOfRequestOrder) {
  std::vector<int64_t> hist(2 * 64);
  for (int i = 0; i < 128; ++i) hist[i] = 1 + (i * 13) % 50;
  TraceOptions o;
  o.seed = 7;
  const auto a = make_routing_source(histograms(hist, 2, 4), o);
  const auto b = make_routing_source(histograms(hist, 2, 4), o);
  const auto first = a->tokens(1, 5, 4, 32);
  for (int i = 0; i < 5; ++i) b->tokens(1, i, 4, 32);  // ask others first
  EXPECT_EQ(b->tokens(1, 5, 4, 32), first);
  EXPECT_NE(a->tokens(1, 6, 4, 32), first);
  EXPECT_NE(a->tokens(0, 5, 4, 32), first);
  EXPECT_NE(a->tokens(1, 5, 8, 16), first);  // P is part of the seed
  o.seed = 8;
  EXPECT_NE(make_routing_source(histograms(hist, 2, 4), o)->tokens(1, 5, 4, 32), first);
  // counts() draws the same routes without materialising tokens.
  EXPECT_EQ(a->counts(1, 5, 4, 32), CountMatrix::from_topk(first, 4, 32, 4, 64));
  EXPECT_EQ(a->num_iterations(4, 32), std::nullopt);
}

TEST(Sampling, FixedStreamIsStableAcrossPlatforms) {
  // Golden values: splitmix64/xoshiro256**/Lemire are fixed algorithms, so these never change.
  trace::Xoshiro256 rng(trace::mix_seed(1, 0, 0, 8));
  const uint64_t first = rng.next();
  trace::Xoshiro256 again(trace::mix_seed(1, 0, 0, 8));
  EXPECT_EQ(again.next(), first);
  uint64_t state = 0;
  EXPECT_EQ(trace::splitmix64(state), 0xe220a8397b1dcdafULL);  // reference splitmix64 output
}

TEST(Sampling, TokensHaveDistinctExpertsWithNonZeroWeight) {
  const std::vector<int64_t> hist{0, 5, 1000000, 3, 0, 7, 1, 0};
  const auto src = make_routing_source(histograms(hist, 1, 4));
  const auto ids = src->tokens(0, 0, 3, 500);
  for (size_t t = 0; t < ids.size() / 4; ++t) {
    std::set<int32_t> seen(ids.begin() + t * 4, ids.begin() + t * 4 + 4);
    EXPECT_EQ(seen.size(), 4u);
    for (const int32_t e : seen) EXPECT_GT(hist[e], 0) << "token " << t << " expert " << e;
  }
  // Fewer non-zero experts than k: the rest of each token is -1.
  const auto sparse = make_routing_source(histograms({0, 3, 0, 9}, 1, 3))->tokens(0, 0, 1, 50);
  for (size_t t = 0; t < 50; ++t) {
    std::multiset<int32_t> got(sparse.begin() + t * 3, sparse.begin() + t * 3 + 3);
    EXPECT_EQ(got, (std::multiset<int32_t>{-1, 1, 3}));
  }
  expect_error([] { make_routing_source(histograms({1, -1}, 1, 1)); }, {"element 1 = -1"});
}

// Inclusion probability of expert e when k = 2 distinct experts are drawn successively:
// P(e) = p_e + sum_{f != e} p_f * p_e / (1 - p_f).
double inclusion_k2(const std::vector<double>& p, size_t e) {
  double q = p[e];
  for (size_t f = 0; f < p.size(); ++f) {
    if (f != e) q += p[f] * p[e] / (1 - p[f]);
  }
  return q;
}

TEST(Sampling, FrequenciesMatchTheHistogram) {
  // k = 1: expert e is drawn with probability hist[e] / total. k = 2: the successive-sampling
  // inclusion probability. N = 400,000 tokens; tolerance 5 standard deviations of a binomial.
  const std::vector<int64_t> hist{50, 30, 10, 6, 3, 1};
  std::vector<double> p;
  for (const int64_t h : hist) p.push_back(h / 100.0);
  for (const int k : {1, 2}) {
    const auto src = make_routing_source(histograms(hist, 1, k));
    const int tau = 100000;
    const auto counts = src->counts(0, 3, 4, tau).histogram();
    const double n = 4.0 * tau;
    for (size_t e = 0; e < hist.size(); ++e) {
      const double q = k == 1 ? p[e] : inclusion_k2(p, e);
      const double sigma = std::sqrt(n * q * (1 - q));
      EXPECT_NEAR(static_cast<double>(counts[e]), n * q, 5 * sigma) << "k " << k << " e " << e;
    }
  }
}

TEST(Sampling, ConcentratedWeightsUseTheExactFallback) {
  // One expert holds almost all weight: after kMaxRejectsPerChoice repeats the sampler scans the
  // rest, whose conditional distribution is 1 : 2 between experts 1 and 2.
  const std::vector<int64_t> hist{int64_t{1} << 40, 1, 2};
  const auto src = make_routing_source(histograms(hist, 1, 2));
  const auto counts = src->counts(0, 0, 1, 60000).histogram();
  EXPECT_EQ(counts[0], 60000);
  const double n = 60000, q = 2.0 / 3.0;
  EXPECT_NEAR(static_cast<double>(counts[2]), n * q, 5 * std::sqrt(n * q * (1 - q)));
  EXPECT_EQ(counts[1] + counts[2], 60000);
}

TEST(IterationCounts, ExactWhenRanksMatchSampledOtherwise) {
  TraceData d;
  d.kind = TraceKind::kIterationCounts;
  d.metadata.source = "recorded";
  d.metadata.num_experts = 4;
  d.metadata.top_k = 2;
  d.metadata.num_layers = 1;
  d.num_iterations = 2;
  d.num_ranks = 2;
  d.iteration_counts = {3, 1, 0, 2, 0, 0, 4, 4,   // iteration 0: rank 0, rank 1
                        1, 1, 1, 0, 2, 2, 0, 0};  // iteration 1
  const auto src = make_routing_source(d);
  EXPECT_EQ(src->num_iterations(2, 8), 2);
  const CountMatrix c = src->counts(0, 0, 2, 8);
  EXPECT_EQ(std::vector<int32_t>(c.data().begin(), c.data().end()),
            (std::vector<int32_t>{3, 1, 0, 2, 0, 0, 4, 4}));
  // tokens() reconstructs lists with distinct experts per token and the same counts.
  const auto ids = src->tokens(0, 0, 2, 8);
  EXPECT_EQ(CountMatrix::from_topk(ids, 2, 8, 2, 4), c);
  for (size_t t = 0; t < 16; ++t) {
    if (ids[2 * t] >= 0 && ids[2 * t + 1] >= 0) {
      EXPECT_NE(ids[2 * t], ids[2 * t + 1]);
    }
  }
  expect_error([&] { src->tokens(0, 0, 2, 2); }, {"rank 0", "more than tau = 2"});
  // Other P: the iteration's histogram (summed over recorded ranks) is sampled.
  const auto sampled = src->counts(0, 1, 4, 100);
  EXPECT_EQ(sampled.total(), 4 * 100 * 2);
  EXPECT_EQ(sampled.histogram()[3], 0);  // expert 3 has no routes in iteration 1
  expect_error([&] { src->counts(0, 2, 2, 8); }, {"iteration 2 out of range [0, 2)"});
}

TEST(Synthetic, PowerLawIsSeededAndFollowsZipf) {
  SyntheticOptions o;
  o.num_experts = 64;
  o.top_k = 1;
  o.num_layers = 2;
  const auto a = make_synthetic(o);
  EXPECT_EQ(a->tokens(1, 3, 4, 64), make_synthetic(o)->tokens(1, 3, 4, 64));
  const auto hist = trace::power_law_histograms(2, 64, 0.8, 1);
  // Each layer is a permutation of the same Zipf weights; layers differ in order.
  std::vector<int64_t> l0(hist.begin(), hist.begin() + 64), l1(hist.begin() + 64, hist.end());
  EXPECT_NE(l0, l1);
  std::sort(l0.rbegin(), l0.rend());
  std::sort(l1.rbegin(), l1.rend());
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(l0[0], int64_t{1} << 30);
  EXPECT_NEAR(static_cast<double>(l0[9]) / l0[0], std::pow(10.0, -0.8), 1e-9);
  o.seed = 2;
  EXPECT_NE(make_synthetic(o)->tokens(1, 3, 4, 64), a->tokens(1, 3, 4, 64));
  o.kind = "zipf";
  expect_error([&] { make_synthetic(o); }, {"unknown kind 'zipf'"});
}

TEST(Synthetic, RankImbalanceTuningHitsTheTargets) {
  // The EP64 heavy-skew setting: EP64, E = 256, top-8, targets 1.5 / 2.0 / 3.0 (2 layers to keep
  // the test short).
  SyntheticOptions o;
  o.num_experts = 256;
  o.top_k = 8;
  o.num_layers = 2;
  o.rank_imbalance_ep = 64;
  double previous_alpha = 0;
  for (const double target : {1.5, 2.0, 3.0}) {
    o.rank_imbalance = target;
    const double alpha = synthetic_alpha(o);
    EXPECT_GT(alpha, previous_alpha);
    previous_alpha = alpha;
    EXPECT_NEAR(trace::power_law_rank_imbalance(o, alpha), target, 0.01 * target);
    if (target == 2.0) {
      EXPECT_EQ(synthetic_alpha(o), alpha);  // deterministic
    }
  }
  o.rank_imbalance = 1000.0;
  expect_error([&] { synthetic_alpha(o); }, {"unreachable", "EP64"});
  o.kind = "mixed";
  expect_error([&] { make_synthetic(o); }, {"rank_imbalance", "'mixed'"});
  o.kind = "power-law";
  o.rank_imbalance_ep = 48;
  o.rank_imbalance = 2.0;
  expect_error([&] { synthetic_alpha(o); }, {"rank_imbalance_ep = 48"});
}

TEST(Synthetic, MixedIsDeterministicRandomAccessAndConsistent) {
  SyntheticOptions o;
  o.kind = "mixed";
  o.num_layers = 2;
  const auto a = make_synthetic(o);
  const auto b = make_synthetic(o);
  EXPECT_EQ(a->num_iterations(8, 8192), std::nullopt);
  const auto t5 = a->tokens(1, 5, 4, 1000);  // 4000 tokens: crosses 2048-token blocks
  EXPECT_EQ(b->tokens(1, 5, 4, 1000), t5);
  EXPECT_EQ(a->counts(1, 5, 4, 1000), CountMatrix::from_topk(t5, 4, 1000, 6, 384));
  // Batching rule over the stream: iteration 1 at P*tau = 2000 is tokens [2000, 4000), the
  // second half of iteration 0 at P*tau = 4000.
  const auto whole = a->tokens(0, 0, 4, 1000);
  const auto half = a->tokens(0, 1, 2, 1000);
  EXPECT_TRUE(std::equal(half.begin(), half.end(), whole.begin() + 2000 * 6));
  for (size_t t = 0; t < t5.size() / 6; ++t) {
    std::set<int32_t> seen(t5.begin() + t * 6, t5.begin() + t * 6 + 6);
    EXPECT_EQ(seen.size(), 6u);
  }
}

}  // namespace
}  // namespace iser
