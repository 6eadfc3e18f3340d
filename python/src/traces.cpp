// iser.read_trace / iser.write_trace / iser.convert: routing data in every format the CLI reads,
// to and from the canonical safetensors layout (docs/design.md §8), as NumPy arrays.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "iser/trace.h"

namespace iser::python {
namespace {

constexpr const char* kKindNames[] = {"tokens", "histograms", "iteration_counts"};

TraceDType parse_dtype(const std::string& s) {
  if (s == "int16") return TraceDType::kInt16;
  if (s == "int32") return TraceDType::kInt32;
  if (s == "int64") return TraceDType::kInt64;
  throw Error(fmt::format("unknown dtype '{}' (int16, int32, int64)", s));
}

TraceKind parse_kind(const std::string& s) {
  for (size_t i = 0; i < std::size(kKindNames); ++i) {
    if (s == kKindNames[i]) return static_cast<TraceKind>(i);
  }
  throw Error(fmt::format("unknown trace kind '{}' (tokens, histograms, iteration_counts)", s));
}

TraceOptions make_options(std::optional<int> num_experts, std::optional<int> top_k,
                          const std::string& category, int64_t skip_rows, bool skip_profile_rows) {
  TraceOptions options;
  options.num_experts = num_experts;
  options.top_k = top_k;
  options.category = category;
  ISER_CHECK(skip_rows >= 0, "skip_rows = {} is negative", skip_rows);
  options.skip_rows = skip_rows;
  options.skip_profile_rows = skip_profile_rows;
  return options;
}

nb::dict metadata_dict(const TraceMetadata& m) {
  nb::dict d;
  d["model"] = m.model;
  d["dataset"] = m.dataset;
  d["source"] = m.source;
  d["num_experts"] = m.num_experts;
  d["top_k"] = m.top_k;
  d["num_layers"] = m.num_layers;
  d["num_tokens"] = m.num_tokens;
  d["skipped_tokens"] = m.skipped_tokens;
  d["notes"] = m.notes;
  return d;
}

// The fields of iser.Trace (python/iser/_trace.py) from the in-memory form.
nb::dict trace_fields(TraceData&& data) {
  const auto& m = data.metadata;
  const auto L = static_cast<size_t>(m.num_layers);
  const auto E = static_cast<size_t>(m.num_experts);
  nb::dict d;
  d["kind"] = kKindNames[static_cast<size_t>(data.kind)];
  d["metadata"] = metadata_dict(m);
  switch (data.kind) {
    case TraceKind::kTokens:
      d["topk_ids"] = to_numpy(std::move(data.topk_ids), {L, static_cast<size_t>(m.num_tokens),
                                                          static_cast<size_t>(m.top_k)});
      d["request_ids"] = data.request_ids.empty()
                             ? nb::none()
                             : to_numpy(std::move(data.request_ids), {data.request_ids.size()});
      break;
    case TraceKind::kHistograms: {
      nb::dict histograms;
      for (size_t c = 0; c < data.categories.size(); ++c) {
        histograms[nb::str(data.categories[c].c_str())] =
            to_numpy(std::move(data.histograms[c]), {L, E});
      }
      d["histograms"] = histograms;
      break;
    }
    case TraceKind::kIterationCounts: {
      const auto I = static_cast<size_t>(data.num_iterations);
      d["iteration_counts"] = data.num_ranks > 0
                                  ? to_numpy(std::move(data.iteration_counts),
                                             {I, L, static_cast<size_t>(data.num_ranks), E})
                                  : to_numpy(std::move(data.iteration_counts), {I, L, E});
      break;
    }
  }
  return d;
}

// The in-memory form from iser.Trace's fields (validated by write_trace).
TraceData trace_from_fields(const nb::dict& d) {
  TraceData data;
  data.kind = parse_kind(nb::cast<std::string>(d["kind"]));
  const nb::dict meta = nb::cast<nb::dict>(d["metadata"]);
  auto& m = data.metadata;
  const auto get_str = [&](const char* key) {
    return meta.contains(key) ? nb::cast<std::string>(meta[key]) : std::string();
  };
  m.model = get_str("model");
  m.dataset = get_str("dataset");
  m.source = get_str("source");
  m.notes = get_str("notes");
  ISER_CHECK(meta.contains("num_experts") && meta.contains("top_k"),
             "trace metadata needs num_experts and top_k");
  m.num_experts = nb::cast<int>(meta["num_experts"]);
  m.top_k = nb::cast<int>(meta["top_k"]);
  switch (data.kind) {
    case TraceKind::kTokens: {
      const AnyArray ids = as_array(d["topk_ids"], "topk_ids");
      check_ndim(ids, 3, "topk_ids", "[num_layers, num_tokens, top_k]");
      m.num_layers = static_cast<int>(ids.shape(0));
      m.num_tokens = static_cast<int64_t>(ids.shape(1));
      ISER_CHECK(static_cast<int>(ids.shape(2)) == m.top_k,
                 "topk_ids: last dimension {} differs from metadata top_k = {}", ids.shape(2),
                 m.top_k);
      data.topk_ids = read_int32(ids, "topk_ids");
      if (d.contains("request_ids") && !d["request_ids"].is_none()) {
        const AnyArray req = as_array(d["request_ids"], "request_ids");
        check_ndim(req, 1, "request_ids", "[num_tokens]");
        data.request_ids = read_int64(req, "request_ids");
      }
      break;
    }
    case TraceKind::kHistograms:
      for (const auto& [key, value] : nb::cast<nb::dict>(d["histograms"])) {
        const AnyArray h = as_array(value, "histograms");
        check_ndim(h, 2, "histograms", "[num_layers, num_experts]");
        m.num_layers = static_cast<int>(h.shape(0));
        data.categories.push_back(nb::cast<std::string>(key));
        data.histograms.push_back(read_int64(h, "histograms"));
      }
      break;
    case TraceKind::kIterationCounts: {
      const AnyArray c = as_array(d["iteration_counts"], "iteration_counts");
      ISER_CHECK(c.ndim() == 3 || c.ndim() == 4,
                 "iteration_counts: expected [I, L, E] or [I, L, P, E], got shape {}",
                 shape_string(c));
      data.num_iterations = static_cast<int64_t>(c.shape(0));
      m.num_layers = static_cast<int>(c.shape(1));
      data.num_ranks = c.ndim() == 4 ? static_cast<int>(c.shape(2)) : 0;
      data.iteration_counts = read_int64(c, "iteration_counts");
      break;
    }
  }
  return data;
}

nb::dict read(const std::string& path, const std::string& format, std::optional<int> num_experts,
              std::optional<int> top_k, const std::string& category, int64_t skip_rows,
              bool skip_profile_rows, const std::string& slot_map, bool trtllm_raw) {
  TraceOptions options = make_options(num_experts, top_k, category, skip_rows, skip_profile_rows);
  options.slot_map = slot_map;
  options.trtllm_raw = trtllm_raw;
  const TraceFormat fmt = parse_trace_format(format);
  TraceData data;
  {
    nb::gil_scoped_release release;
    data = read_trace_data(path, options, fmt);
  }
  return trace_fields(std::move(data));
}

void write(const std::string& path, const nb::dict& fields, const std::string& ids_dtype,
           const std::string& counts_dtype) {
  const TraceData data = trace_from_fields(fields);
  const TraceDType ids = parse_dtype(ids_dtype);
  const TraceDType counts = parse_dtype(counts_dtype);
  nb::gil_scoped_release release;
  write_trace(path, data, ids, counts);
}

}  // namespace

void bind_traces(nb::module_& m) {
  m.def("read_trace", &read, nb::arg("path"), nb::kw_only(), nb::arg("format") = "auto",
        nb::arg("num_experts") = nb::none(), nb::arg("top_k") = nb::none(),
        nb::arg("category") = "", nb::arg("skip_rows") = 0, nb::arg("skip_profile_rows") = false,
        nb::arg("slot_map") = "", nb::arg("trtllm_raw") = false);
  m.def("write_trace", &write, nb::arg("path"), nb::arg("fields"), nb::kw_only(),
        nb::arg("ids_dtype") = "int32", nb::arg("counts_dtype") = "int64");
}

}  // namespace iser::python
