// vLLM's expert-load and routed-experts tensors, and the map arithmetic the engine readers share.
#include <algorithm>
#include <set>

#include <fmt/ranges.h>

#include "common.h"
#include "engines.h"
#include "iser/error.h"
#include "torch_file.h"

namespace iser::trace {
namespace {

constexpr std::string_view kGlobalLoad = "global_expert_load";
constexpr std::string_view kLoadPass = "expert_load_pass";
constexpr std::string_view kLoadWindow = "expert_load_window";
constexpr std::string_view kLoadWindowStep = "expert_load_window_step";
constexpr std::string_view kPhysToLogical = "physical_to_logical_map";
constexpr std::string_view kRoutedExperts = "routed_experts";

const NamedTensor* find_tensor(const std::vector<NamedTensor>& tensors, std::string_view name) {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void expect_rank(const NamedTensor& t, size_t rank, std::string_view layout,
                 std::string_view name) {
  ISER_CHECK(t.shape.size() == rank, "{}: tensor '{}' has shape {}, expected {}", name, t.name,
             shape_text(t.shape), layout);
}

std::optional<int64_t> metadata_int(const std::map<std::string, std::string>& metadata,
                                    std::string_view key, std::string_view name) {
  const auto it = metadata.find(std::string(key));
  if (it == metadata.end()) return std::nullopt;
  const auto v = parse_decimal(it->second);
  ISER_CHECK(v.has_value(), "{}: metadata {} = '{}' is not an integer", name, key,
             it->second.substr(0, 40));
  return v;
}

void set_layers(TraceMetadata& meta, int64_t layers, std::string_view name) {
  ISER_CHECK(layers >= 1 && layers <= kMaxTraceLayers, "{}: L = {}, expected 1..{}", name, layers,
             kMaxTraceLayers);
  meta.num_layers = static_cast<int>(layers);
}

// expert_load_pass / expert_load_window: physical columns mapped to logical experts.
TraceData read_physical_load(const NamedTensor& load, const std::vector<NamedTensor>& tensors,
                             std::string_view name, const TraceOptions& options) {
  const bool window = load.name == kLoadWindow;
  expect_rank(load, window ? 3 : 2, window ? "[W, L, physical]" : "[L, physical]", name);
  const NamedTensor* map_tensor = find_tensor(tensors, kPhysToLogical);
  ISER_CHECK(map_tensor != nullptr,
             "{}: '{}' counts physical experts; save vLLM's physical_to_logical_map "
             "[L, physical] in the same file so they can be mapped to logical experts",
             name, load.name);
  const int64_t layers = load.shape[load.shape.size() - 2];
  const int64_t physical = load.shape.back();
  ISER_CHECK(map_tensor->shape == std::vector<int64_t>({layers, physical}),
             "{}: physical_to_logical_map has shape {}, expected [L, physical] = [{}, {}]", name,
             shape_text(map_tensor->shape), layers, physical);
  const ExpertMap map = make_expert_map(map_tensor->values, layers, physical,
                                        fmt::format("{}: physical_to_logical_map", name));
  TraceData data;
  auto& meta = data.metadata;
  ISER_CHECK(!options.num_experts || *options.num_experts == map.num_experts,
             "{}: physical_to_logical_map names E = {} logical experts but num_experts = {} was "
             "requested",
             name, map.num_experts, options.num_experts.value_or(0));
  meta.num_experts = map.num_experts;
  set_layers(meta, layers, name);
  const int64_t rows = window ? load.shape[0] : 1;
  std::vector<int64_t> counts =
      physical_to_logical_counts(load.values, rows, map, fmt::format("{}: {}", name, load.name));
  std::string order = "stored (ring) order: save expert_load_window_step to restore time order";
  if (const NamedTensor* step = find_tensor(tensors, kLoadWindowStep); window && step) {
    // vLLM writes row `step`, then advances it modulo W: the oldest row is the next one written.
    ISER_CHECK(step->values.size() == 1 && step->values[0] >= 0 && step->values[0] < rows,
               "{}: expert_load_window_step must hold one index in [0, W = {})", name, rows);
    const auto row_size = static_cast<size_t>(layers) * static_cast<size_t>(map.num_experts);
    std::rotate(counts.begin(),
                counts.begin() +
                    static_cast<std::ptrdiff_t>(static_cast<size_t>(step->values[0]) * row_size),
                counts.end());
    order = fmt::format("time order (ring rotated at step {})", step->values[0]);
  }
  if (window) {
    const int64_t dropped =
        drop_zero_rows(counts, static_cast<size_t>(layers) * static_cast<size_t>(map.num_experts));
    ISER_CHECK(dropped < rows, "{}: every row of '{}' is zero: no routes recorded", name,
               load.name);
    data.kind = TraceKind::kIterationCounts;
    data.num_iterations = rows - dropped;
    data.iteration_counts = std::move(counts);
    meta.notes = fmt::format("vLLM expert_load_window: {} step(s) in {}, {} empty row(s) dropped",
                             data.num_iterations, order, dropped);
  } else {
    data.kind = TraceKind::kHistograms;
    data.categories.emplace_back();
    data.histograms.push_back(std::move(counts));
    meta.notes = "vLLM expert_load_pass mapped to logical experts";
  }
  return data;
}

}  // namespace

ExpertMap make_expert_map(std::vector<int64_t> values, int64_t num_layers, int64_t num_physical,
                          std::string_view what) {
  ISER_CHECK(num_layers >= 1 && num_layers <= kMaxTraceLayers && num_physical >= 1 &&
                 num_physical <= kMaxTraceExperts,
             "{}: shape [{}, {}] out of range", what, num_layers, num_physical);
  ISER_CHECK(static_cast<int64_t>(values.size()) == num_layers * num_physical,
             "{}: {} values, expected {} x {}", what, values.size(), num_layers, num_physical);
  ExpertMap map;
  map.num_layers = static_cast<int>(num_layers);
  map.num_physical = static_cast<int>(num_physical);
  int64_t max_id = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    ISER_CHECK(values[i] >= 0 && values[i] < num_physical,
               "{}: [{}, {}] = {} is not a logical expert id in [0, {})", what,
               static_cast<int64_t>(i) / num_physical, static_cast<int64_t>(i) % num_physical,
               values[i], num_physical);
    max_id = std::max(max_id, values[i]);
  }
  map.num_experts = static_cast<int>(max_id + 1);
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<bool> seen(static_cast<size_t>(map.num_experts), false);
    for (int64_t p = 0; p < num_physical; ++p) seen[values[l * num_physical + p]] = true;
    const auto missing = std::find(seen.begin(), seen.end(), false);
    ISER_CHECK(missing == seen.end(), "{}: layer {} has no copy of expert {} (of E = {})", what, l,
               missing - seen.begin(), map.num_experts);
  }
  map.logical.assign(values.begin(), values.end());
  return map;
}

std::vector<int64_t> physical_to_logical_counts(const std::vector<int64_t>& physical, int64_t rows,
                                                const ExpertMap& map, std::string_view what) {
  const auto L = static_cast<size_t>(map.num_layers);
  const auto P = static_cast<size_t>(map.num_physical);
  const auto E = static_cast<size_t>(map.num_experts);
  ISER_CHECK(physical.size() == static_cast<size_t>(rows) * L * P,
             "{}: {} counts, expected {} x {} x {}", what, physical.size(), rows, L, P);
  std::vector<int64_t> out(static_cast<size_t>(rows) * L * E, 0);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    for (size_t l = 0; l < L; ++l) {
      for (size_t p = 0; p < P; ++p) {
        const int64_t c = physical[(r * L + l) * P + p];
        ISER_CHECK(c >= 0 && c <= kMaxCount, "{}: [{}, {}, {}] = {} is not a count in [0, 2^40]",
                   what, r, l, p, c);
        out[(r * L + l) * E + static_cast<size_t>(map.at(static_cast<int>(l), p))] += c;
      }
    }
  }
  return out;
}

int64_t drop_zero_rows(std::vector<int64_t>& counts, size_t row_size) {
  if (row_size == 0) return 0;
  size_t kept = 0;
  const size_t rows = counts.size() / row_size;
  for (size_t r = 0; r < rows; ++r) {
    const auto begin = counts.begin() + static_cast<std::ptrdiff_t>(r * row_size);
    const auto end = begin + static_cast<std::ptrdiff_t>(row_size);
    if (std::all_of(begin, end, [](int64_t v) { return v == 0; })) continue;
    std::copy(begin, end, counts.begin() + static_cast<std::ptrdiff_t>(kept * row_size));
    ++kept;
  }
  counts.resize(kept * row_size);
  return static_cast<int64_t>(rows - kept);
}

TraceData read_vllm_tensors(const std::vector<NamedTensor>& tensors,
                            const std::map<std::string, std::string>& metadata,
                            std::string_view name, const TraceOptions& options) {
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  TraceData data;
  if (const NamedTensor* t = find_tensor(tensors, kRoutedExperts)) {
    expect_rank(*t, 3, "[T, L, top_k]", name);
    const int64_t T = t->shape[0], L = t->shape[1], k = t->shape[2];
    auto& meta = data.metadata;
    set_layers(meta, L, name);
    meta.num_experts =
        resolve_num_experts(name, options, metadata_int(metadata, "num_experts", name),
                            "num_experts (routed_experts holds ids only)");
    ISER_CHECK(!options.top_k || *options.top_k == k,
               "{}: routed_experts has top_k = {} columns but top_k = {} was requested", name, k,
               options.top_k.value_or(0));
    TraceOptions with_k = options;
    with_k.top_k = k;
    meta.top_k = resolve_top_k(name, with_k, k, "routed_experts top_k");
    meta.num_tokens = T;
    data.kind = TraceKind::kTokens;
    data.topk_ids.resize(t->values.size());
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t j = 0; j < k; ++j) {
          const int64_t v = t->values[(i * L + l) * k + j];
          ISER_CHECK(v >= -1 && v < meta.num_experts,
                     "{}: routed_experts[{}, {}, {}] = {} outside [-1, {}) (num_experts = {})",
                     name, i, l, j, v, meta.num_experts, meta.num_experts);
          data.topk_ids[(l * T + i) * k + j] = static_cast<int32_t>(v);
        }
      }
    }
    meta.notes = "vLLM routed_experts [T, L, k] transposed to [L, T, k]";
  } else if (const NamedTensor* g = find_tensor(tensors, kGlobalLoad)) {
    expect_rank(*g, 2, "[L, E] (logical experts)", name);
    auto& meta = data.metadata;
    set_layers(meta, g->shape[0], name);
    ISER_CHECK(!options.num_experts || *options.num_experts == g->shape[1],
               "{}: global_expert_load has E = {} but num_experts = {} was requested", name,
               g->shape[1], options.num_experts.value_or(0));
    TraceOptions with_e = options;
    with_e.num_experts = g->shape[1];
    meta.num_experts = resolve_num_experts(name, with_e, g->shape[1], "E");
    data.kind = TraceKind::kHistograms;
    data.categories.emplace_back();
    data.histograms.push_back(g->values);
    meta.notes = "vLLM global_expert_load";
  } else if (const NamedTensor* w = find_tensor(tensors, kLoadWindow)) {
    data = read_physical_load(*w, tensors, name, options);
  } else if (const NamedTensor* p = find_tensor(tensors, kLoadPass)) {
    data = read_physical_load(*p, tensors, name, options);
  } else {
    throw Error(fmt::format(
        "{}: no tensor says what it holds (have: {}); expected topk_ids / expert_counts / "
        "iteration_counts (canonical), or vLLM's global_expert_load [L, E], expert_load_window "
        "[W, L, physical] or expert_load_pass [L, physical] with physical_to_logical_map, or "
        "routed_experts [T, L, k]",
        name, fmt::join(names, ", ")));
  }
  auto& meta = data.metadata;
  meta.source = std::string(name);
  if (meta.top_k == 0) {
    meta.top_k = resolve_top_k(name, options, metadata_int(metadata, "top_k", name), "top_k");
  }
  if (auto it = metadata.find("model"); it != metadata.end()) meta.model = it->second;
  if (auto it = metadata.find("dataset"); it != metadata.end()) meta.dataset = it->second;
  data.validate(name);
  return data;
}

}  // namespace iser::trace
