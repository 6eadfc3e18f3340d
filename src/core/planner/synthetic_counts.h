// Deterministic synthetic count matrices for planner tests, property checks, benchmarks and the
// iser-policy evaluation (not a routing source: replay uses iser::make_synthetic).
#pragma once

#include <cstdint>

#include "iser/counts.h"

namespace iser::testing {

// splitmix64: a small, fast, seedable generator with identical output everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound).
  uint32_t below(uint32_t bound) {
    return static_cast<uint32_t>((next() >> 32) * static_cast<uint64_t>(bound) >> 32);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

struct ZipfOptions {
  int num_ranks = 8;
  int num_experts = 384;
  int tokens_per_rank = 8192;
  int top_k = 8;
  double alpha = 0.8;  // expert popularity ∝ 1 / (popularity rank + 1)^alpha, random expert order
  uint64_t seed = 1;   // fixes the expert order (per layer)
  uint64_t iteration = 0;  // varies the sampled tokens for a fixed expert order
};

// Every token draws top_k distinct experts with probability ∝ popularity (without replacement).
CountMatrix zipf_counts(const ZipfOptions& options);

// Rank-level max/mean of the expected (whole-set) home loads for this popularity.
double zipf_rank_imbalance(const ZipfOptions& options);

// Smallest alpha (bisection to 1e-4 over [0, 4]) whose zipf_rank_imbalance reaches `target`.
double tune_zipf_alpha(ZipfOptions options, double target);

// Cheap random skewed counts for property tests: each (rank, expert) count is uniform in
// [0, scale_e] with expert scales spread over a power law; some experts may be zero.
CountMatrix random_skewed_counts(int num_ranks, int num_experts, int max_count, uint64_t seed);

}  // namespace iser::testing
