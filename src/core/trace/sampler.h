// The sampling rule (docs/design.md §8): each token draws k distinct experts with probability
// proportional to an integer weight (a histogram count), without replacement.
//
// Draws use an exact integer alias table (Vose's construction on weights scaled by E, so every
// bucket holds exactly `total` units and no floating point enters): one uniform bucket, one
// uniform threshold in [0, total). A repeat of an expert already chosen by the token is rejected
// and redrawn, which is exactly successive sampling without replacement. After
// kMaxRejectsPerChoice consecutive repeats (weights concentrated on the chosen experts) the
// remaining choices use an exact linear scan over the unchosen experts, so a token never loops
// for long; both paths draw from the same conditional distribution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "rng.h"

namespace iser::trace {

class ExpertSampler {
 public:
  static constexpr int kMaxRejectsPerChoice = 16;
  static constexpr int kMaxTopK = 64;

  ExpertSampler() = default;
  // weights[e] >= 0; sum * E must stay below 2^62 (throws otherwise).
  ExpertSampler(std::span<const int64_t> weights, int top_k);

  int num_experts() const { return static_cast<int>(weights_.size()); }
  int top_k() const { return top_k_; }
  // Choices per token actually drawn: min(k, experts with non-zero weight); the rest are -1.
  int effective_top_k() const { return effective_k_; }

  // One token: out[0, k) gets distinct experts in draw order, padded with -1.
  void draw_token(Xoshiro256& rng, int32_t* out) const;
  // num_tokens tokens into out [num_tokens, k].
  void sample_tokens(Xoshiro256& rng, int64_t num_tokens, int32_t* out) const;
  // The same draws as sample_tokens (same rng consumption), accumulated into counts[E].
  void sample_counts(Xoshiro256& rng, int64_t num_tokens, int32_t* counts) const;

 private:
  int32_t draw(Xoshiro256& rng) const {
    const uint64_t bucket = rng.below(static_cast<uint64_t>(alias_.size()));
    const uint64_t unit = rng.below(total_);
    return unit < prob_[bucket] ? static_cast<int32_t>(bucket) : alias_[bucket];
  }
  int32_t draw_excluding(Xoshiro256& rng, const int32_t* chosen, int num_chosen) const;

  int top_k_ = 0;
  int effective_k_ = 0;
  uint64_t total_ = 0;
  std::vector<int64_t> weights_;
  std::vector<uint64_t> prob_;  // bucket keeps its own expert when unit < prob_
  std::vector<int32_t> alias_;
};

}  // namespace iser::trace

namespace iser::trace {

// The stream of one invocation of the sampling rule: seeded by (seed, layer, iteration, P) only,
// so an invocation's routes do not depend on which other invocations were asked for, or in
// which order; tokens are drawn rank 0 first, tau per rank.
inline Xoshiro256 invocation_stream(uint64_t seed, int layer_idx, int64_t iteration_idx,
                                    int num_ranks) {
  return Xoshiro256(mix_seed(seed, static_cast<uint64_t>(layer_idx),
                             static_cast<uint64_t>(iteration_idx),
                             static_cast<uint64_t>(num_ranks)));
}

}  // namespace iser::trace
