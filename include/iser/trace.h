// Routing data (DESIGN §8): what replay consumes, whatever the file format.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "iser/counts.h"

namespace iser {

struct TraceMetadata {
  std::string model;
  std::string dataset;
  std::string source;  // file path or generator description
  int num_experts = 0;
  int top_k = 0;
  int num_layers = 0;
};

// A source of per-invocation routing. Token-level sources follow the batching rule (iteration i
// of P ranks x tau tokens takes the next P*tau tokens in trace order; rank r gets
// [i*P*tau + r*tau, i*P*tau + (r+1)*tau); a shorter tail is dropped). Histogram sources follow
// the sampling rule (every token draws k distinct experts with probability proportional to the
// count, without replacement), seeded per (layer, iteration, P) so results are reproducible and
// independent of the order in which they are asked for.
class RoutingSource {
 public:
  virtual ~RoutingSource() = default;
  virtual const TraceMetadata& metadata() const = 0;
  // Full iterations available for P ranks x tau tokens; nullopt when unbounded (sampled).
  virtual std::optional<int64_t> num_iterations(int num_ranks, int tokens_per_rank) const = 0;
  // Tokens dropped at the tail for this batching (0 for sampled sources).
  virtual int64_t dropped_tokens(int num_ranks, int tokens_per_rank) const { return 0; }
  // topk ids [P*tau, k] of one invocation; -1 marks an empty choice.
  virtual std::vector<int32_t> tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                                      int tokens_per_rank) const = 0;
  // The count matrix of one invocation (default: built from tokens()).
  virtual CountMatrix counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                             int tokens_per_rank) const;
};

struct TraceOptions {
  std::optional<int> num_experts;  // override / supply E (never guessed from the largest id)
  std::optional<int> top_k;
  uint64_t seed = 1;
  std::string category;  // histogram category (expert_counts.<name>), empty = the only/first one
};

// Opens a routing file or directory, detecting the format: canonical safetensors, TensorRT-LLM
// dump directory (meta_info.json + rank{r}.safetensors), vLLM safetensors [L, E], SGLang JSON
// (logical_count), JSONL per-token top-k. Throws iser::Error naming the file, field and value.
std::unique_ptr<RoutingSource> open_trace(const std::filesystem::path& path,
                                          const TraceOptions& options = {});

struct SyntheticOptions {
  std::string kind = "power-law";  // power-law | mixed
  int num_experts = 384;
  int top_k = 6;
  int num_layers = 8;
  double alpha = 0.8;  // power-law Zipf exponent
  // power-law: when set, alpha is tuned (seeded, deterministic) until the whole-set rank-level
  // max/mean load at this EP degree reaches the target.
  std::optional<double> rank_imbalance;
  int rank_imbalance_ep = 64;
  uint64_t seed = 1;
};
std::unique_ptr<RoutingSource> make_synthetic(const SyntheticOptions& options);

// The bundled real data set (DeepSeek-V4.1-Flash coding histograms, data/).
std::filesystem::path bundled_default_trace();

}  // namespace iser
