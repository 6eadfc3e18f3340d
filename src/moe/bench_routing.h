// Routing for the GPU benchmarks: the E3 sampling rule of DESIGN §8 (every token draws top-k
// distinct experts with probability proportional to a weight), power-law weights and per-layer
// expert histograms (CSV `layer,e0,...,e{E-1}`). Deterministic on every platform (SplitMix64,
// no std distributions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "iser/counts.h"

namespace iser::moe {

// Deterministic across platforms (std distributions are not).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b);
// [num_tokens, top_k] expert ids.
std::vector<int32_t> sample_topk(const std::vector<double>& weights, int64_t num_tokens, int top_k,
                                 uint64_t seed);
// Counts of P x tau sampled tokens (rank r gets tokens [r*tau, (r+1)*tau)).
CountMatrix sample_counts(const std::vector<double>& weights, int num_ranks, int tokens_per_rank,
                          int top_k, uint64_t seed);
// Zipf popularity pow(i + 1, -alpha) over a seeded random expert order.
std::vector<double> power_law_weights(int num_experts, double alpha, uint64_t seed);
// Weights indexed by layer; throws iser::Error naming the file, line and field.
std::vector<std::vector<double>> read_histograms(const std::string& path, int num_experts);

}  // namespace iser::moe
