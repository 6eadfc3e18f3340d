// Synthetic routing generators (docs/design.md §8), internal interface for tools that calibrate
// them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "iser/trace.h"
#include "rng.h"

namespace iser::trace {

// Fisher-Yates with the project's RNG (std::shuffle is implementation-defined): a seeded order
// of 0..n-1.
std::vector<int32_t> shuffled_order(int n, Xoshiro256& rng);

// Zipf weights 1/(rank+1)^alpha over a seeded random expert order per layer, as integers
// (hottest = 2^30, floor 1): [L, E].
std::vector<int64_t> power_law_histograms(int num_layers, int num_experts, double alpha,
                                          uint64_t seed);

// Mean over layers of the whole-set rank imbalance at P ranks, measured by sampling
// kTuningTokens tokens per layer with the sampling rule (seeded, deterministic).
inline constexpr int64_t kTuningTokens = 1 << 16;
double power_law_rank_imbalance(const SyntheticOptions& options, double alpha);

// The `mixed` generator's knobs (defaults are the calibrated ones, docs/data.md).
struct MixedParams {
  int num_workloads = 6;
  double base_alpha = 0.95;      // Zipf exponent of the layer's shared popularity
  double workload_alpha = 1.3;   // Zipf exponent of a workload's own hot set
  double workload_share = 0.4;   // weight of the workload's own distribution (beta)
  double head_offset = 0.5;      // Zipf-Mandelbrot offset q: weight of rank i = (i + 1 + q)^-alpha
  double cutoff = 1e9;           // exponential tail cutoff: weight of rank i *= exp(-i / cutoff)
  double drift_amplitude = 1.0;  // mixture logits swing +-A over a period
  int64_t drift_period = int64_t{1} << 24;  // tokens
  int min_request = 128;                    // request lengths, uniform in [min, max] tokens
  int max_request = 1024;
};
std::unique_ptr<RoutingSource> make_mixed(const SyntheticOptions& options,
                                          const MixedParams& params);

}  // namespace iser::trace
