// Routing data (docs/design.md §8): what replay consumes, whatever the file format.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
  int64_t num_tokens = 0;      // token traces: T (after joins and skips); 0 otherwise
  int64_t skipped_tokens = 0;  // tokens or rows the reader dropped (incomplete joins, skip_rows)
  std::string notes;           // human-readable account of what the reader dropped or assumed
  // The model's layer id of each of the num_layers layers (ascending, distinct), from the file
  // (safetensors `__metadata__.layers`); empty: the layers are 0..num_layers-1.
  std::vector<int> layer_ids;
  // Layer id of layer index l (l itself when the file names none).
  int layer_id(int layer_idx) const { return layer_ids.empty() ? layer_idx : layer_ids[layer_idx]; }
  // Layers that carry no route at all (dense layers, all-zero rows): filled by
  // make_routing_source; replay leaves them out unless they are selected explicitly.
  std::vector<int> routeless_layers;
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
  // JSONL: drop this many leading route rows (e.g. 2048 for vLLM's start-up profiling batch).
  int64_t skip_rows = 0;
  // JSONL: drop the leading run of rows that look like vLLM's profiling batch: every weight equal
  // (1/k within 1e-6) and the same ids as the first row. The count is reported in notes.
  bool skip_profile_rows = false;
  // TensorRT-LLM with the MoE load balancer: the dump counts slots. This JSON file maps them to
  // experts: {"<layer>": [expert of slot 0, expert of slot 1, ...], ...} (the load balancer's
  // initial_global_assignments) or one array for every layer.
  std::filesystem::path slot_map;
  // TensorRT-LLM dump directory: read the per-token rank<r>_raw.safetensors files (token trace)
  // instead of the per-rank counts (also the choice when only _raw files exist).
  bool trtllm_raw = false;
};

// ---- routing data in memory (the canonical safetensors layout, docs/design.md §8)
// ----------------------

enum class TraceKind {
  kTokens,           // topk_ids [L, T, k] (+ request_id [T])
  kHistograms,       // expert_counts.<category> [L, E]
  kIterationCounts,  // iteration_counts [I, L, E] or iteration_rank_counts [I, L, P, E]
};

struct TraceData {
  TraceKind kind = TraceKind::kTokens;
  TraceMetadata metadata;  // num_experts, top_k and num_layers always set by readers
  // kTokens
  std::vector<int32_t> topk_ids;     // [L, T, k]; -1 = empty choice
  std::vector<int64_t> request_ids;  // [T] or empty
  // kHistograms: one [L, E] matrix per category ("" = a bare `expert_counts` tensor)
  std::vector<std::string> categories;
  std::vector<std::vector<int64_t>> histograms;
  // kIterationCounts
  int64_t num_iterations = 0;
  int num_ranks = 0;  // 0: [I, L, E]; > 0: per source rank, [I, L, P, E]
  std::vector<int64_t> iteration_counts;

  // Throws iser::Error when shapes, ids or counts are inconsistent (what every reader guarantees).
  void validate(std::string_view what) const;
};

enum class TraceFormat { kAuto, kSafetensors, kCsv, kJsonl, kTrtllm, kVllm, kSglang };
// "auto" | "safetensors" | "csv" | "jsonl" | "trtllm" | "vllm" | "sglang".
TraceFormat parse_trace_format(std::string_view name);
std::string_view trace_format_name(TraceFormat format);
// Looks at the path (directory, extension) and the first bytes; throws when nothing matches.
TraceFormat detect_trace_format(const std::filesystem::path& path);

// Reads any supported format into the canonical in-memory form.
TraceData read_trace_data(const std::filesystem::path& path, const TraceOptions& options = {},
                          TraceFormat format = TraceFormat::kAuto);

// Parsers over bytes already in memory (`name` appears in error messages). The safetensors
// parser accepts canonical files and vLLM tensors named for what they hold (global_expert_load,
// expert_load_pass / expert_load_window with physical_to_logical_map, routed_experts).
TraceData parse_safetensors_trace(std::string_view bytes, std::string_view name,
                                  const TraceOptions& options = {});
TraceData parse_jsonl_trace(std::string_view text, std::string_view name,
                            const TraceOptions& options = {});
TraceData parse_sglang_trace(std::string_view text, std::string_view name,
                             const TraceOptions& options = {});
TraceData parse_csv_histograms(std::string_view text, std::string_view name,
                               const TraceOptions& options = {});
TraceData read_trtllm_dump(const std::filesystem::path& directory,
                           const TraceOptions& options = {});
// torch.save files (zip + a restricted pickle that executes nothing): SGLang expert-distribution
// dumps (stat: logical_count; per_pass / per_token: records + last_physical_to_logical_map) or a
// dict of vLLM tensors (global_expert_load, expert_load_window + physical_to_logical_map,
// routed_experts).
TraceData parse_torch_trace(std::string_view bytes, std::string_view name,
                            const TraceOptions& options = {});
// A directory of SGLang per_pass / per_token dumps, one .pt file per rank.
TraceData read_torch_dump_dir(const std::filesystem::path& directory,
                              const TraceOptions& options = {});

// Layers in which no token picks any expert (dense layers; all-zero count rows).
std::vector<int> find_routeless_layers(const TraceData& data);

// ---- canonical safetensors writers -------------------------------------------------------------

enum class TraceDType { kInt16, kInt32, kInt64 };

// Writes `data` (validated first) as canonical safetensors. ids_dtype applies to topk_ids
// (int16/int32), counts_dtype to count tensors (int32/int64); narrowing that would lose a value
// throws.
void write_trace(const std::filesystem::path& path, const TraceData& data,
                 TraceDType ids_dtype = TraceDType::kInt32,
                 TraceDType counts_dtype = TraceDType::kInt64);
std::string serialize_trace(const TraceData& data, TraceDType ids_dtype = TraceDType::kInt32,
                            TraceDType counts_dtype = TraceDType::kInt64);

// Convenience wrappers: metadata must carry num_experts and top_k.
void write_token_trace(const std::filesystem::path& path, const TraceMetadata& metadata,
                       std::span<const int32_t> topk_ids, int num_layers, int64_t num_tokens,
                       std::span<const int64_t> request_ids = {},
                       TraceDType ids_dtype = TraceDType::kInt32);
void write_histograms(const std::filesystem::path& path, const TraceMetadata& metadata,
                      std::span<const std::string> categories,
                      std::span<const std::vector<int64_t>> histograms, int num_layers,
                      TraceDType counts_dtype = TraceDType::kInt64);
// num_ranks = 0 writes iteration_counts [I, L, E], otherwise iteration_rank_counts [I, L, P, E].
void write_iteration_counts(const std::filesystem::path& path, const TraceMetadata& metadata,
                            std::span<const int64_t> counts, int64_t num_iterations, int num_layers,
                            int num_ranks = 0, TraceDType counts_dtype = TraceDType::kInt64);

// Wraps in-memory data as a routing source (batching rule for tokens, sampling rule for
// histograms; per-iteration counts: exact when P matches the recorded ranks, else sampled).
std::unique_ptr<RoutingSource> make_routing_source(TraceData data,
                                                   const TraceOptions& options = {});

// Opens a routing file or directory, detecting the format: canonical safetensors, TensorRT-LLM
// dump directory (meta_info.json + rank{r}.safetensors), vLLM tensors, SGLang .pt dumps (a file
// or a directory of rank files), SGLang JSON (logical_count), JSONL per-token top-k. Throws
// iser::Error naming the file, field and value.
std::unique_ptr<RoutingSource> open_trace(const std::filesystem::path& path,
                                          const TraceOptions& options = {});

struct SyntheticOptions {
  std::string kind = "power-law";  // power-law | mixed | a skew family (docs/evaluation.md)
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
// The Zipf exponent that make_synthetic uses (options.alpha, or the tuned one when
// rank_imbalance is set).
double synthetic_alpha(const SyntheticOptions& options);
std::unique_ptr<RoutingSource> make_synthetic(const SyntheticOptions& options);

// Real drift (docs/data.md): iteration i's batch of P * tau tokens is cut into requests (runs of
// tokens from one topic, lengths geometric with mean request_tokens, cut at the batch end)
// whose topics are drawn from a mixture that moves linearly between anchors `period`
// iterations apart; the anchor a gives a seeded random topic the share `focus` and splits the
// rest evenly. Each token then draws k experts from its topic's histogram of that layer (the
// sampling rule). `iid` draws every token's topic on its own (no runs). Seeded; served layers
// are the layer ids every topic holds.
struct DriftOptions {
  std::vector<std::filesystem::path> topics;  // histogram files; empty: bundled_drift_topics()
  int64_t period = 8;                         // iterations between mixture anchors
  double focus = 0.8;                         // the anchor topic's share at an anchor
  double request_tokens = 256;                // mean run length (tokens)
  bool iid = false;                           // i.i.d. topics per token instead of runs
  uint64_t seed = 1;
};
std::unique_ptr<RoutingSource> make_drift(const DriftOptions& options);
// The bundled topics of DeepSeek-V4.1-Flash: coding, cpp, medical (data/README.md).
std::vector<std::filesystem::path> bundled_drift_topics();

// The bundled real data set (DeepSeek-V4.1-Flash coding histograms): $ISER_DATA_DIR when set,
// else the copy installed beside the binary holding this code (`<prefix>/share/iser/data` for
// `<prefix>/bin/iser`, `iser/data` in the Python package), else the source tree's data/ directory.
std::filesystem::path bundled_default_trace();

// Whole-set rank imbalance max/mean of one layer histogram at P ranks with contiguous home
// experts (E must be divisible by P).
double histogram_rank_imbalance(std::span<const int64_t> histogram, int num_ranks);

}  // namespace iser
