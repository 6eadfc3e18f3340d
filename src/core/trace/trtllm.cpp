// TensorRT-LLM expert statistics (tensorrt_llm/_torch/expert_statistic.py): a directory with
// meta_info.json, rank<r>.safetensors ("<iteration>_<layer>" -> bincount [num_experts]) and, in
// newer versions, rank<r>_raw.safetensors ("<iteration>_<layer>" -> token_selected_experts
// [T, k]). Under pipeline parallelism each rank holds only its stage's layers; with the MoE load
// balancer the ids and counts are per slot. Layout and how to get a dump: docs/data.md.
#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "engines.h"
#include "iser/error.h"
#include "iser/trace.h"
#include "safetensors.h"

namespace iser {
namespace {

using nlohmann::json;
using Key = std::pair<int64_t, int64_t>;  // (iteration, layer)

struct RankTensor {
  int rank = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> values;
};

// Per layer id: slot -> expert.
struct SlotMap {
  std::map<int64_t, trace::ExpertMap> by_layer;
  std::optional<trace::ExpertMap> every_layer;
  int num_experts = 0;

  const trace::ExpertMap& of(int64_t layer, std::string_view name) const {
    if (every_layer) return *every_layer;
    const auto it = by_layer.find(layer);
    ISER_CHECK(it != by_layer.end(), "{}: the slot map has no entry for layer {}", name, layer);
    return it->second;
  }
};

trace::ExpertMap slot_row(const json& row, int64_t num_slots, const std::string& what) {
  ISER_CHECK(row.is_array() && static_cast<int64_t>(row.size()) == num_slots,
             "{} is not an array of {} expert ids (one per slot)", what, num_slots);
  std::vector<int64_t> values;
  for (size_t s = 0; s < row.size(); ++s) {
    ISER_CHECK(row[s].is_number_integer(), "{}[{}] = {} is not an integer", what, s,
               trace::describe(row[s]));
    values.push_back(row[s].get<int64_t>());
  }
  return trace::make_expert_map(std::move(values), 1, num_slots, what);
}

SlotMap read_slot_map(const std::filesystem::path& path, int64_t num_slots) {
  const std::string name = path.string();
  const json doc = json::parse(trace::read_file_bytes(path), nullptr, false);
  ISER_CHECK(!doc.is_discarded(), "{}: not valid JSON", name);
  SlotMap map;
  if (doc.is_array()) {
    map.every_layer = slot_row(doc, num_slots, name);
    map.num_experts = map.every_layer->num_experts;
    return map;
  }
  ISER_CHECK(doc.is_object() && !doc.empty(),
             "{}: expected {{\"<layer>\": [expert of each slot]}} or one array", name);
  for (const auto& [key, row] : doc.items()) {
    const auto layer = trace::parse_decimal(key);
    ISER_CHECK(layer && *layer >= 0, "{}: key '{}' is not a layer id", name, key.substr(0, 40));
    auto m = slot_row(row, num_slots, fmt::format("{}: layer {}", name, *layer));
    ISER_CHECK(map.by_layer.empty() || m.num_experts == map.num_experts,
               "{}: layer {} maps to {} experts, other layers to {}", name, *layer, m.num_experts,
               map.num_experts);
    map.num_experts = m.num_experts;
    map.by_layer.emplace(*layer, std::move(m));
  }
  return map;
}

// "<iteration>_<layer>" tensors of every rank<r><suffix>.safetensors file.
std::map<Key, std::vector<RankTensor>> read_rank_files(const std::filesystem::path& directory,
                                                       const std::vector<int>& ranks,
                                                       std::string_view suffix) {
  static const std::regex kKey(R"((0|[1-9][0-9]{0,9})_(0|[1-9][0-9]{0,5}))");
  std::map<Key, std::vector<RankTensor>> cells;
  for (const int r : ranks) {
    const auto path = directory / fmt::format("rank{}{}.safetensors", r, suffix);
    const std::string bytes = trace::read_file_bytes(path);
    const auto view = trace::parse_safetensors(bytes, path.string());
    ISER_CHECK(!view.tensors.empty(), "{}: no tensors", path.string());
    for (const auto& t : view.tensors) {
      std::smatch m;
      ISER_CHECK(std::regex_match(t.name, m, kKey),
                 "{}: tensor '{}' is not named '<iteration>_<layer>'", path.string(), t.name);
      cells[{std::stoll(m[1].str()), std::stoll(m[2].str())}].push_back(
          {r, t.shape, view.read_integers(t)});
    }
  }
  return cells;
}

std::vector<int> rank_ids(const std::filesystem::path& directory, std::string_view suffix) {
  const std::regex pattern(fmt::format(R"(rank(0|[1-9][0-9]{{0,5}}){}\.safetensors)", suffix));
  std::vector<int> ranks;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, pattern)) ranks.push_back(std::stoi(m[1].str()));
  }
  std::sort(ranks.begin(), ranks.end());
  ISER_CHECK(ranks.size() <= static_cast<size_t>(kMaxRanks), "{}: {} rank files, limit {}",
             directory.string(), ranks.size(), kMaxRanks);
  ISER_CHECK(ranks.empty() || ranks.back() == static_cast<int>(ranks.size()) - 1,
             "{}: rank files must be rank0..rank{}{} with none missing (found {}, highest {})",
             directory.string(), ranks.size() - 1, suffix, ranks.size(),
             ranks.empty() ? 0 : ranks.back());
  return ranks;
}

struct Layout {
  std::vector<int64_t> iterations;
  std::vector<int64_t> layers;
  std::string notes;
};

Layout check_layout(const std::map<Key, std::vector<RankTensor>>& cells, const std::string& dir) {
  Layout out;
  std::set<int64_t> iterations, layers;
  for (const auto& [key, _] : cells) {
    iterations.insert(key.first);
    layers.insert(key.second);
  }
  ISER_CHECK(layers.size() <= static_cast<size_t>(trace::kMaxTraceLayers),
             "{}: {} layers, limit {}", dir, layers.size(), trace::kMaxTraceLayers);
  ISER_CHECK(cells.size() == iterations.size() * layers.size(),
             "{}: {} (iteration, layer) keys do not cover {} iterations x {} layers", dir,
             cells.size(), iterations.size(), layers.size());
  out.iterations.assign(iterations.begin(), iterations.end());
  out.layers.assign(layers.begin(), layers.end());
  // Each layer must be held by the same ranks in every iteration.
  std::map<int64_t, std::vector<int>> holders;
  for (const auto& [key, tensors] : cells) {
    std::vector<int> ranks;
    for (const auto& t : tensors) ranks.push_back(t.rank);
    auto [it, fresh] = holders.emplace(key.second, ranks);
    ISER_CHECK(fresh || it->second == ranks,
               "{}: layer {} is held by ranks {} in iteration {} but by {} elsewhere", dir,
               key.second, fmt::join(ranks, ","), key.first, fmt::join(it->second, ","));
  }
  std::map<std::vector<int>, std::vector<int64_t>> stages;
  for (const auto& [layer, ranks] : holders) stages[ranks].push_back(layer);
  if (stages.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [ranks, ls] : stages) {
      parts.push_back(
          fmt::format("ranks {} hold layers {}", fmt::join(ranks, ","), fmt::join(ls, ",")));
    }
    out.notes = fmt::format("pipeline stages: {}", fmt::join(parts, "; "));
  }
  if (out.layers.front() != 0 || out.layers.back() != static_cast<int64_t>(out.layers.size()) - 1) {
    const std::string ids = fmt::format("layer ids {} mapped to 0..{}", fmt::join(out.layers, ","),
                                        out.layers.size() - 1);
    out.notes = out.notes.empty() ? ids : out.notes + "; " + ids;
  }
  return out;
}

// Per-rank counts: [I, L, P', E] when every layer is held by P' ranks, else summed [I, L, E].
void fill_counts(TraceData& data, const std::map<Key, std::vector<RankTensor>>& cells,
                 const Layout& layout, int64_t width, const SlotMap* slots,
                 const std::string& dir) {
  const auto E = static_cast<size_t>(data.metadata.num_experts);
  size_t holders = cells.begin()->second.size();
  bool uniform = true;
  for (const auto& [key, tensors] : cells) uniform = uniform && tensors.size() == holders;
  const size_t P = uniform ? holders : 1;
  data.kind = TraceKind::kIterationCounts;
  data.num_iterations = static_cast<int64_t>(layout.iterations.size());
  data.num_ranks = uniform ? static_cast<int>(holders) : 0;
  data.iteration_counts.reserve(cells.size() * P * E);
  // std::map iterates (iteration, layer) in ascending order: the [I, L, P, E] layout.
  for (const auto& [key, tensors] : cells) {
    std::vector<int64_t> block(P * E, 0);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const RankTensor& t = tensors[i];
      const std::string what =
          fmt::format("{}/rank{}.safetensors: tensor '{}_{}'", dir, t.rank, key.first, key.second);
      ISER_CHECK(t.shape == std::vector<int64_t>{width},
                 "{} has shape {}, expected [{}] (meta_info.json num_experts)", what,
                 fmt::format("[{}]", fmt::join(t.shape, ",")), width);
      std::vector<int64_t> counts = t.values;
      if (slots != nullptr) {
        counts = trace::physical_to_logical_counts(t.values, 1, slots->of(key.second, dir), what);
      }
      const size_t r = uniform ? i : 0;
      for (size_t e = 0; e < E; ++e) {
        ISER_CHECK(counts[e] >= 0 && counts[e] <= trace::kMaxCount, "{}[{}] = {} is not a count",
                   what, e, counts[e]);
        block[r * E + e] += counts[e];
      }
    }
    data.iteration_counts.insert(data.iteration_counts.end(), block.begin(), block.end());
  }
  if (!uniform) {
    data.metadata.notes += (data.metadata.notes.empty() ? "" : "; ");
    data.metadata.notes += "layers held by different numbers of ranks: counts summed over ranks";
  }
}

// Token ids [L, T, k]: per layer, iterations in order, each iteration's ranks in order.
void fill_tokens(TraceData& data, const std::map<Key, std::vector<RankTensor>>& cells,
                 const Layout& layout, int64_t width, const SlotMap* slots,
                 const std::string& dir) {
  const int64_t k =
      cells.begin()->second.front().shape.size() == 2 ? cells.begin()->second.front().shape[1] : 0;
  ISER_CHECK(data.metadata.top_k == k, "{}: _raw tensors have {} columns but top_k = {}", dir, k,
             data.metadata.top_k);
  std::map<int64_t, int64_t> tokens_of_iteration;
  for (const auto& [key, tensors] : cells) {
    int64_t tokens = 0;
    for (const auto& t : tensors) {
      ISER_CHECK(t.shape.size() == 2 && t.shape[1] == k,
                 "{}/rank{}_raw.safetensors: tensor '{}_{}' has shape {}, expected [T, {}]", dir,
                 t.rank, key.first, key.second, fmt::format("[{}]", fmt::join(t.shape, ",")), k);
      tokens += t.shape[0];
    }
    auto [it, fresh] = tokens_of_iteration.emplace(key.first, tokens);
    ISER_CHECK(fresh || it->second == tokens,
               "{}: iteration {} has {} tokens in layer {} but {} in an earlier layer", dir,
               key.first, tokens, key.second, it->second);
  }
  int64_t T = 0;
  for (const auto& [it, n] : tokens_of_iteration) T += n;
  data.kind = TraceKind::kTokens;
  data.metadata.num_tokens = T;
  data.topk_ids.reserve(static_cast<size_t>(T * k) * layout.layers.size());
  for (const int64_t layer : layout.layers) {
    for (const int64_t iteration : layout.iterations) {
      for (const auto& t : cells.at({iteration, layer})) {
        for (const int64_t id : t.values) {
          ISER_CHECK(id >= 0 && id < width,
                     "{}/rank{}_raw.safetensors: tensor '{}_{}' holds id {} outside [0, {})", dir,
                     t.rank, iteration, layer, id, width);
          data.topk_ids.push_back(slots != nullptr ? slots->of(layer, dir).at(0, id)
                                                   : static_cast<int32_t>(id));
        }
      }
    }
  }
}

}  // namespace

TraceData read_trtllm_dump(const std::filesystem::path& directory, const TraceOptions& options) {
  const std::string dir = directory.string();
  const auto meta_path = directory / "meta_info.json";
  const json meta_json = json::parse(trace::read_file_bytes(meta_path), nullptr, false);
  ISER_CHECK(!meta_json.is_discarded() && meta_json.is_object(), "{}: not a valid JSON object",
             meta_path.string());
  const std::string meta_name = meta_path.string();
  const auto file_width = trace::json_int(meta_json, {"num_experts"}, meta_name);
  const auto file_k = trace::json_int(meta_json, {"num_experts_per_token", "top_k"}, meta_name);

  TraceData data;
  auto& meta = data.metadata;
  meta.source = dir;
  std::optional<SlotMap> slots;
  int64_t width = 0;  // entries per count tensor / id range: slots or experts
  if (!options.slot_map.empty()) {
    ISER_CHECK(file_width.has_value(),
               "{}: no num_experts (the slot count) to check the slot "
               "map against",
               meta_name);
    width = *file_width;
    ISER_CHECK(width >= 1 && width <= trace::kMaxTraceExperts, "{}: num_experts = {}", meta_name,
               width);
    slots = read_slot_map(options.slot_map, width);
    ISER_CHECK(!options.num_experts || *options.num_experts == slots->num_experts,
               "{}: maps {} slots to E = {} experts but num_experts = {} was requested",
               options.slot_map.string(), width, slots->num_experts,
               options.num_experts.value_or(0));
    meta.num_experts = slots->num_experts;
  } else {
    ISER_CHECK(!options.num_experts || !file_width || *options.num_experts == *file_width,
               "{}: num_experts = {} but {} experts were requested: with TensorRT-LLM's MoE load "
               "balancer the dump counts slots, not experts; pass a slot map "
               "(TraceOptions::slot_map, --slot-map FILE: JSON "
               "{{\"<layer>\": [expert of slot 0, ...]}}, the load balancer's "
               "initial_global_assignments) to map them",
               meta_name, file_width.value_or(0), options.num_experts.value_or(0));
    meta.num_experts = trace::resolve_num_experts(meta_name, options, file_width, "num_experts");
    width = meta.num_experts;
  }
  meta.top_k = trace::resolve_top_k(meta_name, options, file_k, "num_experts_per_token");
  meta.model = trace::json_string(meta_json, {"model"});
  meta.dataset = trace::json_string(meta_json, {"dataset"});

  const std::vector<int> count_ranks = rank_ids(directory, "");
  const std::vector<int> raw_ranks = rank_ids(directory, "_raw");
  const bool raw = options.trtllm_raw || (count_ranks.empty() && !raw_ranks.empty());
  const std::vector<int>& ranks = raw ? raw_ranks : count_ranks;
  ISER_CHECK(!ranks.empty(), "{}: no rank<r>{}.safetensors files", dir, raw ? "_raw" : "");
  const auto cells = read_rank_files(directory, ranks, raw ? "_raw" : "");
  const Layout layout = check_layout(cells, dir);
  meta.num_layers = static_cast<int>(layout.layers.size());
  meta.notes = layout.notes;
  if (raw) {
    fill_tokens(data, cells, layout, width, slots ? &*slots : nullptr, dir);
  } else {
    fill_counts(data, cells, layout, width, slots ? &*slots : nullptr, dir);
  }
  if (slots) {
    const std::string note =
        fmt::format("{} load-balancer slots mapped to {} experts", width, slots->num_experts);
    meta.notes = meta.notes.empty() ? note : note + "; " + meta.notes;
  }
  data.validate(dir);
  return data;
}

}  // namespace iser
