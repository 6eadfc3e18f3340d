// Internal pieces of the routing sources shared with the synthetic generators.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "iser/counts.h"
#include "iser/trace.h"
#include "sampler.h"

namespace iser::trace {

inline constexpr int kMaxTokensPerRank = 1 << 24;

// Validates (layer, iteration, P, tau) against the source's shape; errors name the source.
void check_invocation(const TraceMetadata& meta, int layer_idx, int64_t iteration_idx,
                      int num_ranks, int tokens_per_rank);

// The sampling rule for one invocation: P*tau tokens from invocation_stream(seed, layer, i, P).
std::vector<int32_t> sample_invocation_tokens(const ExpertSampler& sampler, uint64_t seed,
                                              int layer_idx, int64_t iteration_idx, int num_ranks,
                                              int tokens_per_rank);
// The same draws accumulated straight into counts (identical to from_topk of the tokens).
CountMatrix sample_invocation_counts(const ExpertSampler& sampler, uint64_t seed, int layer_idx,
                                     int64_t iteration_idx, int num_ranks, int tokens_per_rank);

// Deterministic token lists [P*tau, k] whose counts equal `counts` (recorded per-rank counts).
std::vector<int32_t> tokens_from_counts(const CountMatrix& counts, int tokens_per_rank, int top_k,
                                        std::string_view what);

}  // namespace iser::trace
