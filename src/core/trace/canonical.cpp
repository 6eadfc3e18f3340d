// Canonical safetensors traces (docs/design.md §8): TraceData validation, reader, writers.
#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "common.h"
#include "engines.h"
#include "iser/error.h"
#include "iser/trace.h"
#include "safetensors.h"

namespace iser {
namespace {

using trace::DType;
using trace::SafetensorsView;
using trace::TensorInfo;

constexpr std::string_view kTopkIds = "topk_ids";
constexpr std::string_view kRequestId = "request_id";
constexpr std::string_view kExpertCounts = "expert_counts";
constexpr std::string_view kIterationCounts = "iteration_counts";
constexpr std::string_view kIterationRankCounts = "iteration_rank_counts";

bool is_histogram_name(std::string_view n) {
  return n == kExpertCounts || (n.size() > kExpertCounts.size() + 1 &&
                                n.substr(0, kExpertCounts.size() + 1) == "expert_counts.");
}

void check_counts(std::string_view what, std::string_view field, std::span<const int64_t> v) {
  for (size_t i = 0; i < v.size(); ++i) {
    ISER_CHECK(v[i] >= 0, "{}: {} element {} = {} is negative", what, field, i, v[i]);
    ISER_CHECK(v[i] <= trace::kMaxCount, "{}: {} element {} = {} exceeds 2^40", what, field, i,
               v[i]);
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

void expect_shape(const SafetensorsView& view, const TensorInfo& t, size_t rank,
                  std::string_view dims) {
  ISER_CHECK(t.shape.size() == rank, "{}: tensor '{}' has shape {}, expected {}", view.name, t.name,
             shape_string(t.shape), dims);
}

void expect_dtype(const SafetensorsView& view, const TensorInfo& t,
                  std::initializer_list<DType> allowed) {
  const bool ok = std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end();
  std::string names;
  for (const DType d : allowed) {
    names += fmt::format("{}{}", names.empty() ? "" : "/", trace::dtype_name(d));
  }
  ISER_CHECK(ok, "{}: tensor '{}' has dtype {}, expected {}", view.name, t.name, t.dtype_name,
             names);
}

std::optional<int64_t> metadata_int(const SafetensorsView& view, const std::string& key) {
  const auto it = view.metadata.find(key);
  if (it == view.metadata.end()) return std::nullopt;
  const auto v = trace::parse_decimal(it->second);
  ISER_CHECK(v.has_value(), "{}: __metadata__.{} = '{}' is not an integer", view.name, key,
             it->second);
  return v;
}

// `__metadata__.layers`: the model's layer id of every layer row, a JSON list of distinct
// non-negative integers in ascending order, one per layer. Absent: layers are 0..L-1.
std::vector<int> metadata_layer_ids(const SafetensorsView& view, int num_layers) {
  const auto it = view.metadata.find("layers");
  if (it == view.metadata.end()) return {};
  const nlohmann::json parsed = nlohmann::json::parse(it->second, nullptr, false);
  ISER_CHECK(parsed.is_array(), "{}: __metadata__.layers = '{}' is not a JSON list of layer ids",
             view.name, it->second);
  ISER_CHECK(static_cast<int>(parsed.size()) == num_layers,
             "{}: __metadata__.layers names {} layers but the tensors hold L = {}", view.name,
             parsed.size(), num_layers);
  std::vector<int> ids;
  for (const auto& v : parsed) {
    ISER_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1 << 20),
               "{}: __metadata__.layers entry {} is not a layer id (an integer in [0, 2^20))",
               view.name, v.dump());
    const int id = v.get<int>();
    ISER_CHECK(ids.empty() || id > ids.back(),
               "{}: __metadata__.layers must be ascending and distinct ({} after {})", view.name,
               id, ids.empty() ? -1 : ids.back());
    ids.push_back(id);
  }
  return ids;
}

// topk_ids decoded straight into int32 (no int64 detour: this is the large tensor).
std::vector<int32_t> read_ids(const SafetensorsView& view, const TensorInfo& t) {
  std::vector<int32_t> ids(t.num_elements);
  const char* src = view.data.data() + t.begin;
  if (t.dtype == DType::kI32) {
    if (!ids.empty()) std::memcpy(ids.data(), src, ids.size() * sizeof(int32_t));
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      int16_t v;
      std::memcpy(&v, src + i * sizeof(int16_t), sizeof(int16_t));
      ids[i] = v;
    }
  }
  return ids;
}

TraceData read_canonical(const SafetensorsView& view, const TraceOptions& options) {
  const std::string& name = view.name;
  TraceData data;
  std::vector<std::string> kinds;
  for (const auto& t : view.tensors) {
    if (t.name == kTopkIds || t.name == kIterationCounts || t.name == kIterationRankCounts) {
      kinds.push_back(t.name);
    } else if (is_histogram_name(t.name)) {
      if (std::find(kinds.begin(), kinds.end(), "expert_counts") == kinds.end()) {
        kinds.emplace_back("expert_counts");
      }
    } else if (t.name != kRequestId) {
      throw Error(fmt::format("{}: unexpected tensor '{}' in a canonical trace", name, t.name));
    }
  }
  ISER_CHECK(kinds.size() == 1,
             "{}: a canonical trace holds exactly one of topk_ids, expert_counts[.<name>], "
             "iteration_counts, iteration_rank_counts; found {}",
             name, kinds.empty() ? std::string("none") : fmt::format("{}", fmt::join(kinds, ", ")));
  const TensorInfo* request = view.find(kRequestId);
  ISER_CHECK(request == nullptr || kinds[0] == kTopkIds,
             "{}: request_id is only allowed beside topk_ids", name);

  auto& meta = data.metadata;
  meta.source = name;
  if (auto it = view.metadata.find("model"); it != view.metadata.end()) meta.model = it->second;
  if (auto it = view.metadata.find("dataset"); it != view.metadata.end()) meta.dataset = it->second;
  meta.num_experts = trace::resolve_num_experts(name, options, metadata_int(view, "num_experts"),
                                                "__metadata__.num_experts");
  const auto file_k = metadata_int(view, "top_k");
  const int num_experts = meta.num_experts;

  if (kinds[0] == kTopkIds) {
    data.kind = TraceKind::kTokens;
    const TensorInfo& t = *view.find(kTopkIds);
    expect_dtype(view, t, {DType::kI16, DType::kI32});
    expect_shape(view, t, 3, "[L, T, k]");
    const int64_t k = t.shape[2];
    ISER_CHECK(!options.top_k || *options.top_k == k,
               "{}: topk_ids has k = {} but top_k = {} was requested", name, k, *options.top_k);
    ISER_CHECK(!file_k || *file_k == k, "{}: topk_ids has k = {} but __metadata__.top_k = {}", name,
               k, *file_k);
    ISER_CHECK(t.shape[0] >= 1 && t.shape[0] <= trace::kMaxTraceLayers && k >= 1 &&
                   k <= trace::kMaxTraceTopK,
               "{}: topk_ids shape {} out of range (1 <= L <= {}, 1 <= k <= {})", name,
               shape_string(t.shape), trace::kMaxTraceLayers, trace::kMaxTraceTopK);
    meta.num_layers = static_cast<int>(t.shape[0]);
    meta.num_tokens = t.shape[1];
    meta.top_k = static_cast<int>(k);
    data.topk_ids = read_ids(view, t);
    if (request != nullptr) {
      expect_shape(view, *request, 1, "[T]");
      ISER_CHECK(request->shape[0] == meta.num_tokens,
                 "{}: request_id has {} entries but topk_ids has T = {}", name, request->shape[0],
                 meta.num_tokens);
      data.request_ids = view.read_integers(*request);
    }
  } else if (kinds[0] == "expert_counts") {
    data.kind = TraceKind::kHistograms;
    meta.top_k = trace::resolve_top_k(name, options, file_k, "__metadata__.top_k");
    for (const auto& t : view.tensors) {
      if (!is_histogram_name(t.name)) continue;
      expect_dtype(view, t, {DType::kI32, DType::kI64});
      expect_shape(view, t, 2, "[L, E]");
      ISER_CHECK(t.shape[1] == num_experts, "{}: tensor '{}' has E = {} but num_experts = {}", name,
                 t.name, t.shape[1], num_experts);
      ISER_CHECK(t.shape[0] >= 1 && t.shape[0] <= trace::kMaxTraceLayers,
                 "{}: tensor '{}' has L = {}, expected 1..{}", name, t.name, t.shape[0],
                 trace::kMaxTraceLayers);
      ISER_CHECK(meta.num_layers == 0 || meta.num_layers == t.shape[0],
                 "{}: tensor '{}' has L = {}, other categories have {}", name, t.name, t.shape[0],
                 meta.num_layers);
      meta.num_layers = static_cast<int>(t.shape[0]);
      data.categories.push_back(t.name == kExpertCounts ? std::string()
                                                        : t.name.substr(kExpertCounts.size() + 1));
      data.histograms.push_back(view.read_integers(t));
    }
  } else {
    data.kind = TraceKind::kIterationCounts;
    meta.top_k = trace::resolve_top_k(name, options, file_k, "__metadata__.top_k");
    const bool per_rank = kinds[0] == kIterationRankCounts;
    const TensorInfo& t = *view.find(kinds[0]);
    expect_dtype(view, t, {DType::kI32, DType::kI64});
    expect_shape(view, t, per_rank ? 4 : 3, per_rank ? "[I, L, P, E]" : "[I, L, E]");
    ISER_CHECK(t.shape.back() == num_experts, "{}: tensor '{}' has E = {} but num_experts = {}",
               name, t.name, t.shape.back(), num_experts);
    ISER_CHECK(t.shape[1] >= 1 && t.shape[1] <= trace::kMaxTraceLayers,
               "{}: tensor '{}' has L = {}, expected 1..{}", name, t.name, t.shape[1],
               trace::kMaxTraceLayers);
    ISER_CHECK(!per_rank || (t.shape[2] >= 1 && t.shape[2] <= kMaxRanks),
               "{}: tensor '{}' has P = {}, expected 1..{}", name, t.name,
               per_rank ? t.shape[2] : 0, kMaxRanks);
    meta.num_layers = static_cast<int>(t.shape[1]);
    data.num_iterations = t.shape[0];
    data.num_ranks = per_rank ? static_cast<int>(t.shape[2]) : 0;
    data.iteration_counts = view.read_integers(t);
  }
  meta.layer_ids = metadata_layer_ids(view, meta.num_layers);
  data.validate(name);
  return data;
}

int64_t checked_product(std::initializer_list<int64_t> dims) {
  int64_t p = 1;
  for (const int64_t d : dims) {
    ISER_CHECK(d >= 0, "negative dimension {}", d);
    ISER_CHECK(d == 0 || p <= INT64_MAX / d, "tensor size overflows int64");
    p *= d;
  }
  return p;
}

}  // namespace

void TraceData::validate(std::string_view what) const {
  const auto& m = metadata;
  ISER_CHECK(m.num_experts >= 1 && m.num_experts <= trace::kMaxTraceExperts,
             "{}: num_experts = {} out of range [1, {}]", what, m.num_experts,
             trace::kMaxTraceExperts);
  ISER_CHECK(m.top_k >= 1 && m.top_k <= trace::kMaxTraceTopK, "{}: top_k = {} out of range [1, {}]",
             what, m.top_k, trace::kMaxTraceTopK);
  ISER_CHECK(m.num_layers >= 1 && m.num_layers <= trace::kMaxTraceLayers,
             "{}: num_layers = {} out of range [1, {}]", what, m.num_layers,
             trace::kMaxTraceLayers);
  ISER_CHECK(m.layer_ids.empty() || static_cast<int>(m.layer_ids.size()) == m.num_layers,
             "{}: {} layer ids for {} layers", what, m.layer_ids.size(), m.num_layers);
  for (size_t l = 0; l < m.layer_ids.size(); ++l) {
    ISER_CHECK(m.layer_ids[l] >= 0 && (l == 0 || m.layer_ids[l] > m.layer_ids[l - 1]),
               "{}: layer ids must be non-negative, ascending and distinct (id {} at position {})",
               what, m.layer_ids[l], l);
  }
  const int64_t L = m.num_layers;
  const int64_t E = m.num_experts;
  switch (kind) {
    case TraceKind::kTokens: {
      ISER_CHECK(m.num_tokens >= 0, "{}: num_tokens = {} is negative", what, m.num_tokens);
      const int64_t expected = checked_product({L, m.num_tokens, m.top_k});
      ISER_CHECK(static_cast<int64_t>(topk_ids.size()) == expected,
                 "{}: topk_ids has {} entries, expected L*T*k = {}*{}*{}", what, topk_ids.size(), L,
                 m.num_tokens, m.top_k);
      ISER_CHECK(request_ids.empty() || static_cast<int64_t>(request_ids.size()) == m.num_tokens,
                 "{}: request_id has {} entries, expected T = {}", what, request_ids.size(),
                 m.num_tokens);
      for (size_t i = 0; i < topk_ids.size(); ++i) {
        const int32_t v = topk_ids[i];
        if (v >= -1 && v < E) [[likely]] {
          continue;
        }
        const int64_t per_layer = m.num_tokens * m.top_k;
        throw Error(fmt::format("{}: topk_ids[{}, {}, {}] = {} outside [-1, {}) (num_experts = {})",
                                what, static_cast<int64_t>(i) / per_layer,
                                static_cast<int64_t>(i) % per_layer / m.top_k,
                                static_cast<int64_t>(i) % m.top_k, v, E, E));
      }
      break;
    }
    case TraceKind::kHistograms: {
      ISER_CHECK(!categories.empty() && categories.size() == histograms.size(),
                 "{}: {} histogram categories with {} matrices", what, categories.size(),
                 histograms.size());
      std::set<std::string> seen;
      for (size_t c = 0; c < categories.size(); ++c) {
        ISER_CHECK(seen.insert(categories[c]).second, "{}: duplicate category '{}'", what,
                   categories[c]);
        ISER_CHECK(static_cast<int64_t>(histograms[c].size()) == L * E,
                   "{}: category '{}' has {} counts, expected L*E = {}*{}", what, categories[c],
                   histograms[c].size(), L, E);
        check_counts(what, fmt::format("expert_counts '{}'", categories[c]), histograms[c]);
      }
      break;
    }
    case TraceKind::kIterationCounts: {
      ISER_CHECK(num_ranks >= 0 && num_ranks <= kMaxRanks, "{}: num_ranks = {} out of range", what,
                 num_ranks);
      const int64_t expected = checked_product({num_iterations, L, std::max(num_ranks, 1), E});
      ISER_CHECK(static_cast<int64_t>(iteration_counts.size()) == expected,
                 "{}: iteration counts have {} entries, expected {}", what, iteration_counts.size(),
                 expected);
      check_counts(what, "iteration counts", iteration_counts);
      break;
    }
  }
}

TraceData parse_safetensors_trace(std::string_view bytes, std::string_view name,
                                  const TraceOptions& options) {
  const SafetensorsView view = trace::parse_safetensors(bytes, name);
  const bool canonical = std::any_of(view.tensors.begin(), view.tensors.end(), [](const auto& t) {
    return t.name == kTopkIds || is_histogram_name(t.name) || t.name == kIterationCounts ||
           t.name == kIterationRankCounts;
  });
  if (canonical) return read_canonical(view, options);
  // Otherwise the tensors must say by name what they hold (vLLM's).
  std::vector<trace::NamedTensor> tensors;
  for (const auto& t : view.tensors) tensors.push_back({t.name, t.shape, view.read_integers(t)});
  return trace::read_vllm_tensors(tensors, view.metadata, name, options);
}

std::string serialize_trace(const TraceData& data, TraceDType ids_dtype, TraceDType counts_dtype) {
  data.validate("trace to write");
  const auto to_dtype = [](TraceDType d) {
    switch (d) {
      case TraceDType::kInt16:
        return DType::kI16;
      case TraceDType::kInt32:
        return DType::kI32;
      case TraceDType::kInt64:
        return DType::kI64;
    }
    return DType::kI64;
  };
  ISER_CHECK(ids_dtype != TraceDType::kInt64, "topk_ids are written as int16 or int32");
  ISER_CHECK(counts_dtype != TraceDType::kInt16, "counts are written as int32 or int64");
  const auto& m = data.metadata;
  std::map<std::string, std::string> metadata{{"num_experts", std::to_string(m.num_experts)},
                                              {"top_k", std::to_string(m.top_k)}};
  if (!m.model.empty()) metadata["model"] = m.model;
  if (!m.dataset.empty()) metadata["dataset"] = m.dataset;
  if (!m.layer_ids.empty()) metadata["layers"] = fmt::format("[{}]", fmt::join(m.layer_ids, ", "));
  std::vector<trace::TensorToWrite> tensors;
  switch (data.kind) {
    case TraceKind::kTokens:
      tensors.push_back({std::string(kTopkIds),
                         to_dtype(ids_dtype),
                         {m.num_layers, m.num_tokens, m.top_k},
                         std::vector<int64_t>(data.topk_ids.begin(), data.topk_ids.end())});
      if (!data.request_ids.empty()) {
        tensors.push_back({std::string(kRequestId), DType::kI64, {m.num_tokens}, data.request_ids});
      }
      break;
    case TraceKind::kHistograms:
      for (size_t c = 0; c < data.categories.size(); ++c) {
        const std::string tensor_name =
            data.categories[c].empty() ? std::string(kExpertCounts)
                                       : fmt::format("{}.{}", kExpertCounts, data.categories[c]);
        tensors.push_back({tensor_name,
                           to_dtype(counts_dtype),
                           {m.num_layers, m.num_experts},
                           data.histograms[c]});
      }
      break;
    case TraceKind::kIterationCounts:
      if (data.num_ranks == 0) {
        tensors.push_back({std::string(kIterationCounts),
                           to_dtype(counts_dtype),
                           {data.num_iterations, m.num_layers, m.num_experts},
                           data.iteration_counts});
      } else {
        tensors.push_back({std::string(kIterationRankCounts),
                           to_dtype(counts_dtype),
                           {data.num_iterations, m.num_layers, data.num_ranks, m.num_experts},
                           data.iteration_counts});
      }
      break;
  }
  return trace::serialize_safetensors(metadata, tensors);
}

void write_trace(const std::filesystem::path& path, const TraceData& data, TraceDType ids_dtype,
                 TraceDType counts_dtype) {
  const std::string bytes = serialize_trace(data, ids_dtype, counts_dtype);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ISER_CHECK(f != nullptr, "{}: cannot open for writing", path.string());
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  ISER_CHECK(written == bytes.size() && closed, "{}: write failed ({} of {} bytes)", path.string(),
             written, bytes.size());
}

void write_token_trace(const std::filesystem::path& path, const TraceMetadata& metadata,
                       std::span<const int32_t> topk_ids, int num_layers, int64_t num_tokens,
                       std::span<const int64_t> request_ids, TraceDType ids_dtype) {
  TraceData data;
  data.kind = TraceKind::kTokens;
  data.metadata = metadata;
  data.metadata.num_layers = num_layers;
  data.metadata.num_tokens = num_tokens;
  data.topk_ids.assign(topk_ids.begin(), topk_ids.end());
  data.request_ids.assign(request_ids.begin(), request_ids.end());
  write_trace(path, data, ids_dtype);
}

void write_histograms(const std::filesystem::path& path, const TraceMetadata& metadata,
                      std::span<const std::string> categories,
                      std::span<const std::vector<int64_t>> histograms, int num_layers,
                      TraceDType counts_dtype) {
  TraceData data;
  data.kind = TraceKind::kHistograms;
  data.metadata = metadata;
  data.metadata.num_layers = num_layers;
  data.categories.assign(categories.begin(), categories.end());
  data.histograms.assign(histograms.begin(), histograms.end());
  write_trace(path, data, TraceDType::kInt32, counts_dtype);
}

void write_iteration_counts(const std::filesystem::path& path, const TraceMetadata& metadata,
                            std::span<const int64_t> counts, int64_t num_iterations, int num_layers,
                            int num_ranks, TraceDType counts_dtype) {
  TraceData data;
  data.kind = TraceKind::kIterationCounts;
  data.metadata = metadata;
  data.metadata.num_layers = num_layers;
  data.num_iterations = num_iterations;
  data.num_ranks = num_ranks;
  data.iteration_counts.assign(counts.begin(), counts.end());
  write_trace(path, data, TraceDType::kInt32, counts_dtype);
}

}  // namespace iser
