// Routing for the GPU benchmarks (include/iser/moe_bench.h): deterministic samplers and the
// per-layer histogram reader. See bench_routing.h.
#include "moe/bench_routing.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "iser/error.h"

namespace iser::moe {

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  SplitMix64 rng(seed ^ (a * 0x100000001b3ull) ^ (b << 32));
  return rng.next();
}

// E3 sampling rule: each token draws top_k distinct experts with probability proportional to
// `weights` (rejection of repeats = sampling without replacement). Returns [num_tokens, top_k].
std::vector<int32_t> sample_topk(const std::vector<double>& weights, int64_t num_tokens, int top_k,
                                 uint64_t seed) {
  const int num_experts = static_cast<int>(weights.size());
  std::vector<double> cdf(weights.size());
  std::partial_sum(weights.begin(), weights.end(), cdf.begin());
  const auto positive =
      std::count_if(weights.begin(), weights.end(), [](double w) { return w > 0; });
  ISER_CHECK(positive >= top_k, "sampler: only {} experts have positive weight, top-k is {}",
             positive, top_k);
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens) * top_k);
  SplitMix64 rng(seed);
  for (int64_t t = 0; t < num_tokens; ++t) {
    int32_t* picks = ids.data() + t * top_k;
    for (int j = 0; j < top_k; ++j) {
      int e = 0;
      do {
        const double u = rng.uniform() * cdf.back();
        e = static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
        e = std::min(e, num_experts - 1);
      } while (weights[e] <= 0 || std::find(picks, picks + j, e) != picks + j);
      picks[j] = e;
    }
  }
  return ids;
}

CountMatrix sample_counts(const std::vector<double>& weights, int num_ranks, int tokens_per_rank,
                          int top_k, uint64_t seed) {
  const std::vector<int32_t> ids =
      sample_topk(weights, int64_t{num_ranks} * tokens_per_rank, top_k, seed);
  return CountMatrix::from_topk(ids, num_ranks, tokens_per_rank, top_k,
                                static_cast<int>(weights.size()));
}

std::vector<double> power_law_weights(int num_experts, double alpha, uint64_t seed) {
  std::vector<int> order(num_experts);
  std::iota(order.begin(), order.end(), 0);
  SplitMix64 rng(seed);
  for (int i = num_experts - 1; i > 0; --i) {
    std::swap(order[i], order[static_cast<int>(rng.next() % static_cast<uint64_t>(i + 1))]);
  }
  std::vector<double> weights(num_experts);
  for (int i = 0; i < num_experts; ++i) weights[order[i]] = std::pow(i + 1.0, -alpha);
  return weights;
}

// CSV `layer,e0,...,e{E-1}`, one row per layer; returns weights indexed by layer.
std::vector<std::vector<double>> read_histograms(const std::string& path, int num_experts) {
  std::ifstream in(path);
  ISER_CHECK(in.good(), "{}: cannot open (--trace)", path);
  std::string line;
  ISER_CHECK(static_cast<bool>(std::getline(in, line)) && line.rfind("layer", 0) == 0,
             "{}: line 1: header must start with 'layer'", path);
  std::vector<std::vector<double>> layers;
  int line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    std::stringstream fields(line);
    std::string field;
    std::getline(fields, field, ',');
    const int layer_idx = std::stoi(field);
    ISER_CHECK(layer_idx == static_cast<int>(layers.size()), "{}: line {}: layer {} out of order",
               path, line_no, layer_idx);
    std::vector<double> weights;
    while (std::getline(fields, field, ',')) {
      char* end = nullptr;
      const double value = std::strtod(field.c_str(), &end);
      ISER_CHECK(end != field.c_str() && value >= 0 && std::isfinite(value),
                 "{}: line {}: field e{} = '{}' is not a count", path, line_no, weights.size(),
                 field);
      weights.push_back(value);
    }
    ISER_CHECK(static_cast<int>(weights.size()) == num_experts,
               "{}: line {}: {} experts, expected {}", path, line_no, weights.size(), num_experts);
    layers.push_back(std::move(weights));
  }
  ISER_CHECK(!layers.empty(), "{}: no layers", path);
  return layers;
}

}  // namespace iser::moe
