// iser.replay / iser.eplb / iser.policies: the main job and DeepSeek's EPLB, with exactly the
// results `iser replay --json` and `iser eplb` print.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "iser/eplb.h"
#include "iser/model.h"
#include "iser/replay.h"
#include "iser/trace.h"

namespace iser::python {
namespace {

// The flags of `iser replay`, unset ones left to the CLI's defaults.
struct ReplayRequest {
  std::string trace;
  std::string synthetic;
  std::optional<std::vector<int>> ep;
  std::optional<int> tokens_per_rank;
  std::optional<int> slots;
  std::optional<int> g_min;
  std::vector<std::string> policies;  // empty: all
  std::vector<int> layers;            // empty: all
  std::optional<int64_t> iterations;
  uint64_t seed = 1;
  int min_move = 0;
  int eplb_window = 0;
  bool validate = false;
  int threads = 0;
  std::optional<int> num_experts;
  std::optional<int> top_k;
  std::optional<int> num_layers;
  std::optional<int> imbalance_ep;
  std::optional<double> alpha;
  std::optional<double> rank_imbalance;
  std::string category;
  int64_t skip_rows = 0;
  bool skip_profile_rows = false;
  std::string project_hw;
};

std::unique_ptr<RoutingSource> open_source(const ReplayRequest& r) {
  if (!r.synthetic.empty()) {
    ISER_CHECK(r.trace.empty(), "--trace and --synthetic are exclusive");
    SyntheticOptions options;
    options.kind = r.synthetic;
    options.seed = r.seed;
    if (r.num_experts) options.num_experts = *r.num_experts;
    if (r.top_k) options.top_k = *r.top_k;
    if (r.num_layers) options.num_layers = *r.num_layers;
    if (r.alpha) options.alpha = *r.alpha;
    if (r.rank_imbalance) options.rank_imbalance = *r.rank_imbalance;
    if (r.imbalance_ep) options.rank_imbalance_ep = *r.imbalance_ep;
    return make_synthetic(options);
  }
  TraceOptions options;
  options.seed = r.seed;
  options.category = r.category;
  options.skip_rows = r.skip_rows;
  options.skip_profile_rows = r.skip_profile_rows;
  if (r.num_experts) options.num_experts = *r.num_experts;
  if (r.top_k) options.top_k = *r.top_k;
  return open_trace(r.trace.empty() ? bundled_default_trace() : std::filesystem::path(r.trace),
                    options);
}

std::string run(const ReplayRequest& r) {
  ReplayConfig config;
  if (r.ep) config.ep_degrees = *r.ep;
  if (r.tokens_per_rank) config.tokens_per_rank = *r.tokens_per_rank;
  if (r.slots) config.num_slots = *r.slots;
  if (r.g_min) config.g_min = *r.g_min;
  config.policies = r.policies;
  config.layers = r.layers;
  config.iterations = r.iterations;
  config.validate = r.validate;
  config.policy_options.min_move = r.min_move;
  config.policy_options.eplb_window = r.eplb_window;
  config.num_threads = r.threads;
  if (!r.project_hw.empty()) config.projection = model::find_layer_time_fit(r.project_hw);
  const auto source = open_source(r);
  return replay_to_json(run_replay(*source, config));
}

nb::tuple eplb(const AnyArray& weight_array, int num_replicas, int num_groups, int num_nodes,
               int num_gpus) {
  check_ndim(weight_array, 2, "weight", "[num_layers, num_experts]");
  const std::vector<double> weight = read_double(weight_array, "weight");
  const EplbConfig config{num_replicas, num_groups, num_nodes, num_gpus};
  EplbPlacement p;
  {
    nb::gil_scoped_release release;
    p = eplb_rebalance(weight, static_cast<int>(weight_array.shape(0)),
                       static_cast<int>(weight_array.shape(1)), config);
  }
  const auto widen = [](const std::vector<int32_t>& v) {
    return std::vector<int64_t>(v.begin(), v.end());
  };
  const auto L = static_cast<size_t>(p.num_layers);
  const auto E = static_cast<size_t>(p.num_experts);
  return nb::make_tuple(
      to_numpy(widen(p.phy2log), {L, static_cast<size_t>(p.num_replicas)}),
      to_numpy(widen(p.log2phy), {L, E, static_cast<size_t>(p.max_replica_count)}),
      to_numpy(widen(p.logcnt), {L, E}));
}

}  // namespace

void bind_replay(nb::module_& m) {
  m.def(
      "replay",
      [](const std::string& trace, const std::string& synthetic, std::optional<std::vector<int>> ep,
         std::optional<int> tokens_per_rank, std::optional<int> slots, std::optional<int> g_min,
         std::vector<std::string> policies, std::vector<int> layers,
         std::optional<int64_t> iterations, uint64_t seed, int min_move, int eplb_window,
         bool validate, int threads, std::optional<int> num_experts, std::optional<int> top_k,
         std::optional<int> num_layers, std::optional<double> alpha,
         std::optional<double> rank_imbalance, std::optional<int> imbalance_ep,
         const std::string& category, int64_t skip_rows, bool skip_profile_rows,
         const std::string& project_hw) {
        const ReplayRequest r{.trace = trace,
                              .synthetic = synthetic,
                              .ep = std::move(ep),
                              .tokens_per_rank = tokens_per_rank,
                              .slots = slots,
                              .g_min = g_min,
                              .policies = std::move(policies),
                              .layers = std::move(layers),
                              .iterations = iterations,
                              .seed = seed,
                              .min_move = min_move,
                              .eplb_window = eplb_window,
                              .validate = validate,
                              .threads = threads,
                              .num_experts = num_experts,
                              .top_k = top_k,
                              .num_layers = num_layers,
                              .imbalance_ep = imbalance_ep,
                              .alpha = alpha,
                              .rank_imbalance = rank_imbalance,
                              .category = category,
                              .skip_rows = skip_rows,
                              .skip_profile_rows = skip_profile_rows,
                              .project_hw = project_hw};
        std::string text;
        {
          nb::gil_scoped_release release;
          text = run(r);
        }
        return json_loads(text);
      },
      nb::kw_only(), nb::arg("trace"), nb::arg("synthetic"), nb::arg("ep").none(),
      nb::arg("tokens_per_rank").none(), nb::arg("slots").none(), nb::arg("g_min").none(),
      nb::arg("policies"), nb::arg("layers"), nb::arg("iterations").none(), nb::arg("seed"),
      nb::arg("min_move"), nb::arg("eplb_window"), nb::arg("validate"), nb::arg("threads"),
      nb::arg("num_experts").none(), nb::arg("top_k").none(), nb::arg("num_layers").none(),
      nb::arg("alpha").none(), nb::arg("rank_imbalance").none(), nb::arg("imbalance_ep").none(),
      nb::arg("category"), nb::arg("skip_rows"), nb::arg("skip_profile_rows"),
      nb::arg("project_hw"));
  m.def(
      "eplb",
      [](nb::handle weight, int num_replicas, int num_groups, int num_nodes, int num_gpus) {
        return eplb(as_array(weight, "weight"), num_replicas, num_groups, num_nodes, num_gpus);
      },
      nb::arg("weight"), nb::arg("num_replicas"), nb::arg("num_groups"), nb::arg("num_nodes"),
      nb::arg("num_gpus"));
  m.def("policies", &available_policies);
  m.def("bundled_trace", [] { return bundled_default_trace().string(); });
}

}  // namespace iser::python
