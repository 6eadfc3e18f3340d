#include "sampler.h"

#include <algorithm>

#include "iser/error.h"

namespace iser::trace {

ExpertSampler::ExpertSampler(std::span<const int64_t> weights, int top_k)
    : top_k_(top_k), weights_(weights.begin(), weights.end()) {
  ISER_CHECK(top_k >= 1 && top_k <= kMaxTopK, "top_k = {} out of range [1, {}]", top_k,
             kMaxTopK);
  ISER_CHECK(!weights.empty() && weights.size() <= (1u << 20), "sampler needs 1..2^20 experts, got {}",
             weights.size());
  const auto num_experts = static_cast<uint64_t>(weights.size());
  const uint64_t limit = (uint64_t{1} << 62) / num_experts;
  int nonzero = 0;
  for (size_t e = 0; e < weights.size(); ++e) {
    ISER_CHECK(weights[e] >= 0, "negative weight {} for expert {}", weights[e], e);
    ISER_CHECK(static_cast<uint64_t>(weights[e]) <= limit - total_,
               "weights too large for the sampler (sum x E must stay below 2^62)");
    total_ += static_cast<uint64_t>(weights[e]);
    nonzero += weights[e] > 0 ? 1 : 0;
  }
  effective_k_ = std::min(top_k, nonzero);
  if (total_ == 0) return;

  // Vose's alias construction in integers: scaled weights sum to E * total, each bucket holds
  // exactly `total` units. Work lists are processed back to front in index order (deterministic).
  std::vector<uint64_t> scaled(num_experts);
  std::vector<int32_t> small;
  std::vector<int32_t> large;
  for (uint64_t e = 0; e < num_experts; ++e) {
    scaled[e] = static_cast<uint64_t>(weights[e]) * num_experts;
    (scaled[e] < total_ ? small : large).push_back(static_cast<int32_t>(e));
  }
  prob_.assign(num_experts, total_);
  alias_.resize(num_experts);
  for (uint64_t e = 0; e < num_experts; ++e) alias_[e] = static_cast<int32_t>(e);
  while (!small.empty() && !large.empty()) {
    const int32_t s = small.back();
    small.pop_back();
    const int32_t l = large.back();
    prob_[s] = scaled[s];
    alias_[s] = l;
    scaled[l] -= total_ - scaled[s];
    if (scaled[l] < total_) {
      large.pop_back();
      small.push_back(l);
    }
  }
  // NOTE: with exact integers the leftovers hold exactly `total` units (prob_ = total already).
}

int32_t ExpertSampler::draw_excluding(Xoshiro256& rng, const int32_t* chosen,
                                      int num_chosen) const {
  uint64_t remaining = total_;
  for (int c = 0; c < num_chosen; ++c) remaining -= static_cast<uint64_t>(weights_[chosen[c]]);
  uint64_t unit = rng.below(remaining);
  for (size_t e = 0; e < weights_.size(); ++e) {
    if (std::find(chosen, chosen + num_chosen, static_cast<int32_t>(e)) != chosen + num_chosen) {
      continue;
    }
    const auto w = static_cast<uint64_t>(weights_[e]);
    if (unit < w) return static_cast<int32_t>(e);
    unit -= w;
  }
  throw Error("internal error: sampler scan ran past the remaining weight");
}

void ExpertSampler::draw_token(Xoshiro256& rng, int32_t* out) const {
  int num_chosen = 0;
  int rejects = 0;
  while (num_chosen < effective_k_) {
    if (rejects >= kMaxRejectsPerChoice) {
      out[num_chosen] = draw_excluding(rng, out, num_chosen);
      ++num_chosen;
      continue;
    }
    const int32_t e = draw(rng);
    if (std::find(out, out + num_chosen, e) != out + num_chosen) {
      ++rejects;
      continue;
    }
    out[num_chosen++] = e;
    rejects = 0;
  }
  for (int c = num_chosen; c < top_k_; ++c) out[c] = -1;
}

void ExpertSampler::sample_tokens(Xoshiro256& rng, int64_t num_tokens, int32_t* out) const {
  for (int64_t t = 0; t < num_tokens; ++t) draw_token(rng, out + t * top_k_);
}

void ExpertSampler::sample_counts(Xoshiro256& rng, int64_t num_tokens, int32_t* counts) const {
  int32_t choices[kMaxTopK];
  for (int64_t t = 0; t < num_tokens; ++t) {
    draw_token(rng, choices);
    for (int c = 0; c < effective_k_; ++c) ++counts[choices[c]];
  }
}

}  // namespace iser::trace
