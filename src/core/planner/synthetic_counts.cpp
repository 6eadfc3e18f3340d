#include "planner/synthetic_counts.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "iser/error.h"

namespace iser::testing {
namespace {

// Popularity weights per expert id: Zipf over a seeded random expert order.
std::vector<double> popularity(const ZipfOptions& o) {
  std::vector<int> order(o.num_experts);
  std::iota(order.begin(), order.end(), 0);
  SplitMix64 rng(o.seed * 0x2545F4914F6CDD1Dull + 17);
  for (int i = o.num_experts - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  std::vector<double> w(o.num_experts);
  for (int i = 0; i < o.num_experts; ++i) w[order[i]] = 1.0 / std::pow(i + 1.0, o.alpha);
  return w;
}

}  // namespace

CountMatrix zipf_counts(const ZipfOptions& o) {
  ISER_CHECK(o.top_k >= 1 && o.top_k <= o.num_experts, "invalid top_k = {}", o.top_k);
  const auto w = popularity(o);
  std::vector<double> cdf(o.num_experts);
  std::partial_sum(w.begin(), w.end(), cdf.begin());
  const double total = cdf.back();
  CountMatrix counts(o.num_ranks, o.num_experts);
  SplitMix64 rng(o.seed ^ (o.iteration + 1) * 0x9E3779B97F4A7C15ull);
  std::vector<int> chosen(o.top_k);
  for (int s = 0; s < o.num_ranks; ++s) {
    auto row = counts.row(s);
    for (int t = 0; t < o.tokens_per_rank; ++t) {
      for (int j = 0; j < o.top_k; ++j) {
        // Rejection of repeats keeps the without-replacement law for top_k << E.
        int e = 0;
        do {
          const double u = rng.unit() * total;
          e = static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
          e = std::min(e, o.num_experts - 1);
        } while (std::find(chosen.begin(), chosen.begin() + j, e) != chosen.begin() + j);
        chosen[j] = e;
        ++row[e];
      }
    }
  }
  return counts;
}

double zipf_rank_imbalance(const ZipfOptions& o) {
  const auto w = popularity(o);
  const int H = o.num_experts / o.num_ranks;
  std::vector<double> loads(o.num_ranks, 0.0);
  for (int e = 0; e < o.num_experts; ++e) loads[e / H] += w[e];
  const double sum = std::accumulate(loads.begin(), loads.end(), 0.0);
  return *std::max_element(loads.begin(), loads.end()) * o.num_ranks / sum;
}

double tune_zipf_alpha(ZipfOptions o, double target) {
  double lo = 0.0;
  double hi = 4.0;
  while (hi - lo > 1e-4) {
    o.alpha = 0.5 * (lo + hi);
    if (zipf_rank_imbalance(o) < target) {
      lo = o.alpha;
    } else {
      hi = o.alpha;
    }
  }
  return hi;
}

CountMatrix random_skewed_counts(int num_ranks, int num_experts, int max_count, uint64_t seed) {
  SplitMix64 rng(seed);
  CountMatrix counts(num_ranks, num_experts);
  std::vector<int32_t> scale(num_experts);
  const int mode = static_cast<int>(rng.below(4));
  for (int e = 0; e < num_experts; ++e) {
    // Power-law scales: a few experts near max_count, most far below; mode 3 adds zeros.
    const double u = rng.unit();
    const double s = max_count * std::pow(u, 1.0 + 3.0 * mode);
    scale[e] = (mode == 3 && rng.below(3) == 0) ? 0 : static_cast<int32_t>(s);
  }
  // A few very hot experts (0..4) concentrate load on their owners.
  const int num_hot = static_cast<int>(rng.below(5));
  for (int i = 0; i < num_hot; ++i) scale[rng.below(num_experts)] = 8 * max_count;
  for (int s = 0; s < num_ranks; ++s) {
    for (int e = 0; e < num_experts; ++e) {
      counts.at(s, e) = scale[e] == 0 ? 0 : static_cast<int32_t>(rng.below(scale[e] + 1));
    }
  }
  return counts;
}

}  // namespace iser::testing
