// `iser replay`: the main job. Replays routing data through the policies and prints, per EP
// degree and policy, the metrics of docs/design.md §7.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <fmt/format.h>

#include "bound_report.h"
#include "commands.h"
#include "iser/error.h"
#include "iser/model.h"
#include "iser/replay.h"
#include "iser/trace.h"
#include "replay_output.h"

namespace iser::cli {
namespace {

struct ReplayArgs {
  std::string trace;
  std::string synthetic;
  SyntheticOptions synthetic_options;
  TraceOptions trace_options;
  int num_experts = 0;
  int top_k = 0;
  double rank_imbalance = 0.0;
  std::string layers;
  std::string policies;
  int64_t iterations = 0;
  int num_threads = 0;
  std::string json_path, csv_path, svg_path, report_dir, projection;
  ReplayConfig config;
  bool quiet = false;
  // Served past and costs.
  std::string plan_trace;
  std::string plan_category;
  int64_t warmup = -1;
  std::string model = "deepseek-v4-flash";
  // Real drift (the default source) and the paper's E1 preset.
  bool drift = false;
  std::string drift_topics;
  DriftOptions drift_options;
  bool paper_e1 = false;
  std::string chart_policies;
  double bound_seconds = 0.0;  // --bound: solver seconds per invocation
};

constexpr int64_t kDefaultDriftIterations = 32;

// "0-3,7,9-10" -> {0,1,2,3,7,9,10}.
std::vector<int> parse_index_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const size_t dash = item.find('-', 1);
      const int first = std::stoi(item.substr(0, dash), &used);
      ISER_CHECK(used == std::min(dash, item.size()), "bad {} entry '{}'", flag, item);
      int last = first;
      if (dash != std::string::npos) {
        last = std::stoi(item.substr(dash + 1), &used);
        ISER_CHECK(used == item.size() - dash - 1, "bad {} entry '{}'", flag, item);
      }
      ISER_CHECK(first >= 0 && last >= first, "bad {} range '{}'", flag, item);
      for (int i = first; i <= last; ++i) out.push_back(i);
    } catch (const std::logic_error&) {
      throw Error(fmt::format("bad {} entry '{}': expected N or N-M", flag, item));
    }
  }
  return out;
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// The default source is real drift over the bundled topics; --trace, --synthetic and
// --paper-e1 (the bundled coding histograms, the paper's E1) replace it.
bool uses_drift(const ReplayArgs& args) {
  return args.drift || (args.trace.empty() && args.synthetic.empty() && !args.paper_e1);
}

std::unique_ptr<RoutingSource> open_source(ReplayArgs& args) {
  ISER_CHECK(!(args.paper_e1 && (!args.trace.empty() || !args.synthetic.empty() || args.drift)),
             "--paper-e1 replays the bundled coding histograms: drop --trace/--synthetic/--drift");
  if (uses_drift(args)) {
    ISER_CHECK(args.trace.empty() && args.synthetic.empty(),
               "--drift is exclusive with --trace and --synthetic");
    DriftOptions options = args.drift_options;
    options.seed = args.trace_options.seed;
    for (const auto& name : split_names(args.drift_topics)) options.topics.emplace_back(name);
    return make_drift(options);
  }
  if (!args.synthetic.empty()) {
    ISER_CHECK(args.trace.empty(), "--trace and --synthetic are exclusive");
    SyntheticOptions options = args.synthetic_options;
    options.kind = args.synthetic;
    if (args.num_experts > 0) options.num_experts = args.num_experts;
    if (args.top_k > 0) options.top_k = args.top_k;
    if (args.rank_imbalance > 0) options.rank_imbalance = args.rank_imbalance;
    return make_synthetic(options);
  }
  TraceOptions options = args.trace_options;
  if (args.num_experts > 0) options.num_experts = args.num_experts;
  if (args.top_k > 0) options.top_k = args.top_k;
  return open_trace(
      args.trace.empty() ? bundled_default_trace() : std::filesystem::path(args.trace), options);
}

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  ~ProgressBar() {
    if (enabled_ && drawn_) fmt::print(stderr, "\r\033[K");
  }
  void update(int64_t done, int64_t total) {
    if (!enabled_) return;
    const std::lock_guard lock(mutex_);
    constexpr int kWidth = 40;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
    fmt::print(stderr, "\r[{:=<{}}{: <{}}] {}/{} layer tasks", "", filled, "", kWidth - filled,
               done, total);
    drawn_ = true;
  }

 private:
  bool enabled_;
  bool drawn_ = false;
  std::mutex mutex_;
};

void run(ReplayArgs& args) {
  ReplayConfig config = args.config;
  if (!args.layers.empty()) config.layers = parse_index_list(args.layers, "--layers");
  if (args.policies == "all" || (args.policies.empty() && args.paper_e1)) {
    config.policies = available_policies();
  } else if (!args.policies.empty()) {
    config.policies = split_names(args.policies);
  }
  if (args.iterations > 0) {
    config.iterations = args.iterations;
  } else if (uses_drift(args)) {
    config.iterations = kDefaultDriftIterations;
  }
  if (args.warmup >= 0) config.warmup = args.warmup;
  if (!args.plan_trace.empty()) {
    TraceOptions plan_options;
    plan_options.category = args.plan_category;
    config.plan_history = read_plan_history(args.plan_trace, plan_options);
  }
  if (args.model != "none") config.cost_model = find_replay_cost_model(args.model);
  config.num_threads = args.num_threads;
  if (!args.projection.empty()) config.projection = model::find_layer_time_fit(args.projection);
  const auto source = open_source(args);
  ProgressBar progress(!args.quiet && isatty(STDERR_FILENO));
  config.progress = [&](int64_t done, int64_t total) { progress.update(done, total); };
  const ReplayResult result = run_replay(*source, config);
  config.progress = nullptr;
  print_replay_tables(result, stdout);
  const ChartOptions charts{args.chart_policies.empty() ? std::vector<std::string>{}
                                                        : split_names(args.chart_policies)};
  if (args.bound_seconds > 0) print_bound_gaps(*source, result, args.bound_seconds, stdout);
  // Output files may name folders that do not exist yet (e.g. --json inside --report's DIR).
  const auto make_parent = [](const std::filesystem::path& path) {
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    ISER_CHECK(!ec, "cannot create folder '{}': {}", path.parent_path().string(), ec.message());
  };
  const auto write_file = [&](const std::string& path, const std::string& text) {
    make_parent(path);
    std::ofstream out(path);
    ISER_CHECK(out.good(), "cannot write '{}'", path);
    out << text;
    ISER_CHECK(out.good(), "failed writing '{}'", path);
  };
  if (!args.json_path.empty()) write_file(args.json_path, replay_to_json(result));
  if (!args.csv_path.empty()) write_file(args.csv_path, replay_to_csv(result));
  if (!args.svg_path.empty()) {
    make_parent(args.svg_path);
    write_layer_svgs(result, args.svg_path, charts);
  }
  if (!args.report_dir.empty()) write_replay_report(result, args.report_dir, charts);
}

}  // namespace

void add_replay_command(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Replay routing data through balancing policies (default: real drift over the bundled "
      "DeepSeek-V4.1-Flash topics coding, cpp and medical at EP 4,8,16,24, 8192 tokens/rank, "
      "S = 4; per-invocation replication against static EPLB planned from the past)");
  cmd->add_option("--trace", args->trace,
                  "Routing file or directory: canonical safetensors, TensorRT-LLM dump, vLLM "
                  "safetensors, SGLang JSON, JSONL per-token top-k");
  cmd->add_option("--synthetic", args->synthetic,
                  "Synthetic routing instead of a trace: power-law, mixed, or a skew family "
                  "(zipf-A, hot-ranks, hot-spread, rank-skew, drift, layer-correlated)");
  cmd->add_option("--alpha", args->synthetic_options.alpha, "power-law: Zipf exponent")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--rank-imbalance", args->rank_imbalance,
                  "power-law: tune alpha to this whole-set rank max/mean at --imbalance-ep ranks")
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--imbalance-ep", args->synthetic_options.rank_imbalance_ep,
                  "power-law: EP degree at which --rank-imbalance is measured")
      ->check(CLI::Range(2, kMaxRanks));
  cmd->add_option("--num-layers", args->synthetic_options.num_layers, "synthetic: MoE layers")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--num-experts", args->num_experts,
                  "Experts E (synthetic; traces without metadata)")
      ->check(CLI::Range(1, kMaxExperts));
  cmd->add_option("--top-k", args->top_k, "Top-k (synthetic; traces without metadata)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--category", args->trace_options.category,
                  "Histogram category of a canonical file (expert_counts.<name>)");
  cmd->add_option("--skip-rows", args->trace_options.skip_rows,
                  "JSONL: drop this many leading route rows")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--skip-profile-rows", args->trace_options.skip_profile_rows,
                "JSONL: drop vLLM's start-up profiling rows (see docs/data.md)");
  cmd->add_option("--ep", args->config.ep_degrees, "EP degrees")->delimiter(',');
  cmd->add_option("--tokens-per-rank", args->config.tokens_per_rank, "Tokens per rank (tau)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--slots", args->config.num_slots, "Helper slots per rank (S)")
      ->check(CLI::Range(0, kMaxSlots));
  cmd->add_option("--g-min", args->config.g_min, "Smallest aligned group size")
      ->check(CLI::Range(1, kMaxRanks));
  cmd->add_option("--lsa-size", args->config.lsa_size,
                  "LSA team size: replication groups stay inside teams of this many consecutive "
                  "ranks (must divide every EP degree; default: one team)")
      ->check(CLI::Range(1, kMaxRanks));
  cmd->add_option("--policies", args->policies,
                  "Comma-separated policies, or 'all' (default: none, eplb, eplb-window, "
                  "eplb-equal-mem, halo-q, iser, oracle)");
  cmd->add_option("--layers", args->layers,
                  "Layer ids, e.g. 3-39 or 0,5,7 (the ids the file carries; default: all)");
  cmd->add_option("--iterations", args->iterations,
                  "Measured iterations per layer, after the warm-up (default: every full one "
                  "for token traces, 32 for drift, 2 for sampled histograms)")
      ->check(CLI::PositiveNumber);
  // Static placements plan only from the past, and every policy carries its costs.
  cmd->add_option("--plan-trace", args->plan_trace,
                  "eplb / eplb-equal-mem plan from this recording (any format; whole-set loads, "
                  "layers matched by the layer ids the files carry) instead of the warm-up");
  cmd->add_option("--plan-category", args->plan_category,
                  "Histogram category of --plan-trace (expert_counts.<name>)");
  cmd->add_option("--warmup", args->warmup,
                  "Iterations served first and left out of every mean (default: the EPLB "
                  "window when a policy plans from the served past, else 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eplb-interval", args->config.policy_options.eplb_interval,
                  "eplb-window: iterations between re-plans (default 1)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--model", args->model,
                  "Memory/traffic columns for this model: deepseek-v4-flash (default), "
                  "deepseek-v4-pro, or none");
  cmd->add_flag("--drift", args->drift,
                "Real drift (the default source): requests from topic histograms, mixture "
                "changing over iterations (docs/data.md)");
  cmd->add_option("--drift-topics", args->drift_topics,
                  "drift: comma-separated histogram files (default: the bundled coding, cpp, "
                  "medical)");
  cmd->add_option("--drift-period", args->drift_options.period,
                  "drift: iterations between mixture anchors")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--drift-focus", args->drift_options.focus,
                  "drift: the anchor topic's share at an anchor")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--request-tokens", args->drift_options.request_tokens,
                  "drift: mean request (run) length in tokens")
      ->check(CLI::Range(1.0, 1e9));
  cmd->add_flag("--iid", args->drift_options.iid,
                "drift: draw every token's topic on its own (no request runs)");
  cmd->add_flag("--paper-e1", args->paper_e1,
                "The paper's E1: the bundled coding histograms sampled i.i.d., every policy");
  cmd->add_option("--chart-policies", args->chart_policies,
                  "Policies drawn in --svg/--report charts (default: the few that carry the "
                  "comparison)");
  cmd->add_option("--seed", args->trace_options.seed, "Sampling seed");
  cmd->add_option("--min-move", args->config.policy_options.min_move,
                  "resident/iser: skip replications moving fewer routes")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eplb-window", args->config.policy_options.eplb_window,
                  "eplb-window: past iterations used to plan")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--validate", args->config.validate, "Check every plan's invariants");
  cmd->add_option("--threads", args->num_threads, "Worker threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", args->json_path, "Write results as JSON");
  cmd->add_option("--csv", args->csv_path, "Write per-layer results as CSV");
  cmd->add_option("--svg", args->svg_path,
                  "Write per-layer R before/after, layers sorted by R (Figure 7a), as SVG; with "
                  "several EP degrees one file per degree (<stem>-ep<P>.svg)");
  cmd->add_option("--report", args->report_dir,
                  "Write the comparison as Markdown tables + SVG figures into this directory");
  cmd->add_option("--project-hw", args->projection,
                  "Project layer time with a fit: a preset (gb200-ep8) or a JSON file "
                  "{name, intercept_us, slope_us, ep, tokens_per_rank}");
  cmd->add_option("--bound", args->bound_seconds,
                  "Also print each policy's gap to the best R any plan can reach under iser's "
                  "constraints (`iser bound`), solving each invocation for at most this many s")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar");
  cmd->callback([args] {
    args->synthetic_options.seed = args->trace_options.seed;
    run(*args);
  });
}

}  // namespace iser::cli
