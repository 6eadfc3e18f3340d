// Routing inputs for the GPU planner tests and benchmark: the bundled real histograms
// (dsv41-flash/coding.csv) and a seeded token sampler (docs/design.md §8 sampling rule: every token
// draws k distinct experts with probability ∝ weight, without replacement). Kept small and local
// until the data readers land in main.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/planner/synthetic_counts.h"

namespace iser::gpu_test {

// Rows of a "layer,e0,...,eN" histogram CSV: one weight vector per layer.
inline std::vector<std::vector<double>> read_histogram_csv(const std::string& path) {
  // NOTE: std::runtime_error, not ISER_CHECK: the benchmark compiles this header with nvcc,
  // which cannot build fmt (iser/error.h).
  std::ifstream in(path);
  if (!in.good()) throw std::runtime_error("cannot open histogram file " + path);
  std::string line;
  std::getline(in, line);  // header
  std::vector<std::vector<double>> layers;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream fields(line);
    std::string cell;
    std::getline(fields, cell, ',');  // layer index
    std::vector<double> weights;
    while (std::getline(fields, cell, ',')) weights.push_back(std::stod(cell));
    layers.push_back(std::move(weights));
  }
  if (layers.empty()) throw std::runtime_error("histogram file " + path + " has no rows");
  return layers;
}

// Zipf popularity over a random expert order: weight of the expert at popularity rank i is
// 1 / (i + 1)^alpha.
inline std::vector<double> zipf_weights(int num_experts, double alpha, uint64_t seed) {
  testing::SplitMix64 rng(seed);
  std::vector<int> order(num_experts);
  std::iota(order.begin(), order.end(), 0);
  for (int i = num_experts - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  std::vector<double> weights(num_experts);
  for (int i = 0; i < num_experts; ++i) weights[order[i]] = 1.0 / std::pow(i + 1.0, alpha);
  return weights;
}

// topk_ids [num_rows * tokens, top_k]: each token draws top_k distinct experts ∝ weights
// (redraws on repeats; zero-weight experts are never drawn unless all are zero). A fraction
// `empty` of the choices is -1.
inline void sample_tokens(const std::vector<double>& weights, int num_rows, int tokens, int top_k,
                          double empty, uint64_t seed, int32_t* out) {
  const int E = static_cast<int>(weights.size());
  std::vector<double> cdf(E);
  double sum = 0;
  for (int e = 0; e < E; ++e) cdf[e] = (sum += std::max(0.0, weights[e]));
  int positive = 0;
  for (double w : weights) positive += w > 0 ? 1 : 0;
  const int k = std::min(top_k, positive > 0 ? positive : E);
  testing::SplitMix64 rng(seed);
  const int64_t num_tokens = static_cast<int64_t>(num_rows) * tokens;
  for (int64_t t = 0; t < num_tokens; ++t) {
    int32_t* row = out + t * top_k;
    std::fill(row, row + top_k, -1);
    for (int j = 0; j < k; ++j) {
      if (empty > 0 && rng.unit() < empty) continue;
      int e = 0;
      bool repeat = true;
      while (repeat) {
        if (sum > 0) {
          const double x = rng.unit() * sum;
          e = static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), x) - cdf.begin());
          e = std::min(e, E - 1);
        } else {
          e = static_cast<int>(rng.below(E));
        }
        repeat = false;
        for (int i = 0; i < j; ++i) repeat |= row[i] == e;
      }
      row[j] = e;
    }
  }
}

}  // namespace iser::gpu_test
