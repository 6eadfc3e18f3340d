// `iser convert`: any supported routing format -> canonical safetensors (docs/design.md §8).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "iser/error.h"
#include "iser/trace.h"

namespace iser::cli {

void add_convert_command(CLI::App& app) {
  struct Args {
    std::string input;
    std::string output;
    std::string format = "auto";
    int num_experts = 0;
    int top_k = 0;
    std::string model;
    std::string dataset;
    std::string category;
    int64_t skip_rows = 0;
    bool skip_profile_rows = false;
    std::string slot_map;
    bool trtllm_raw = false;
    std::string ids_dtype = "int32";
    std::string counts_dtype = "int64";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert routing data (csv, jsonl, trtllm, vllm, sglang .pt/.json) to canonical safetensors");
  cmd->add_option("--input,-i", args->input, "input file or TensorRT-LLM dump directory")
      ->required();
  cmd->add_option("--output,-o", args->output, "output .safetensors file")->required();
  cmd->add_option("--format", args->format, "auto|safetensors|csv|jsonl|trtllm|vllm|sglang")
      ->capture_default_str();
  cmd->add_option("--num-experts", args->num_experts, "E (overrides the input's own)");
  cmd->add_option("--top-k", args->top_k, "k (overrides the input's own)");
  cmd->add_option("--model", args->model, "model name stored in the metadata");
  cmd->add_option("--dataset", args->dataset, "data set name stored in the metadata");
  cmd->add_option("--category", args->category,
                  "histograms: write them as expert_counts.<category>");
  cmd->add_option("--skip-rows", args->skip_rows, "JSONL: drop this many leading route rows");
  cmd->add_flag("--skip-profile-rows", args->skip_profile_rows,
                "JSONL: drop the leading run of vLLM profiling rows (equal weights, same ids)");
  cmd->add_option("--slot-map", args->slot_map,
                  "TensorRT-LLM load-balancer dump: JSON slot -> expert map "
                  "({\"<layer>\": [expert of each slot]} or one array)");
  cmd->add_flag("--trtllm-raw", args->trtllm_raw,
                "TensorRT-LLM dump: read the per-token rank<r>_raw.safetensors files");
  cmd->add_option("--ids-dtype", args->ids_dtype, "int16|int32")->capture_default_str();
  cmd->add_option("--counts-dtype", args->counts_dtype, "int32|int64")->capture_default_str();
  cmd->callback([args] {
    TraceOptions options;
    if (args->num_experts != 0) options.num_experts = args->num_experts;
    if (args->top_k != 0) options.top_k = args->top_k;
    options.skip_rows = args->skip_rows;
    options.skip_profile_rows = args->skip_profile_rows;
    options.slot_map = args->slot_map;
    options.trtllm_raw = args->trtllm_raw;
    const auto dtype = [](const std::string& s) {
      if (s == "int16") return TraceDType::kInt16;
      if (s == "int32") return TraceDType::kInt32;
      if (s == "int64") return TraceDType::kInt64;
      throw Error(fmt::format("unknown dtype '{}' (int16, int32, int64)", s));
    };
    TraceData data = read_trace_data(args->input, options, parse_trace_format(args->format));
    if (!args->model.empty()) data.metadata.model = args->model;
    if (!args->dataset.empty()) data.metadata.dataset = args->dataset;
    if (!args->category.empty()) {
      ISER_CHECK(data.kind == TraceKind::kHistograms && data.categories.size() == 1,
                 "--category applies to inputs holding one histogram set");
      data.categories[0] = args->category;
    }
    write_trace(args->output, data, dtype(args->ids_dtype), dtype(args->counts_dtype));
    const auto& m = data.metadata;
    std::string shape;
    switch (data.kind) {
      case TraceKind::kTokens:
        shape = fmt::format("topk_ids [{}, {}, {}]", m.num_layers, m.num_tokens, m.top_k);
        break;
      case TraceKind::kHistograms:
        shape = fmt::format("{} histogram set(s) [{}, {}]", data.categories.size(), m.num_layers,
                            m.num_experts);
        break;
      case TraceKind::kIterationCounts:
        shape = data.num_ranks > 0
                    ? fmt::format("iteration_rank_counts [{}, {}, {}, {}]", data.num_iterations,
                                  m.num_layers, data.num_ranks, m.num_experts)
                    : fmt::format("iteration_counts [{}, {}, {}]", data.num_iterations,
                                  m.num_layers, m.num_experts);
        break;
    }
    const std::vector<int> routeless = find_routeless_layers(data);
    fmt::print("wrote {}: {} (E = {}, top-{}){}{}{}\n", args->output, shape, m.num_experts, m.top_k,
               m.notes.empty() ? "" : "; ", m.notes,
               routeless.empty() ? std::string()
                                 : fmt::format("; {} layer(s) without routes (dense): {}",
                                               routeless.size(), fmt::join(routeless, ",")));
  });
}

}  // namespace iser::cli
