// Readers for other tools' dumps: SGLang expert distribution JSON and CSV histograms. Layouts
// are specified in docs/data.md.
#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "common.h"
#include "iser/error.h"
#include "iser/trace.h"
#include "safetensors.h"

namespace iser {
namespace {

using nlohmann::json;
using trace::describe;
using trace::json_int;
using trace::json_string;

// Appends a JSON array of E non-negative integers.
void append_count_row(const json& row, int64_t num_experts, std::string_view name,
                      std::string_view where, std::vector<int64_t>& out) {
  ISER_CHECK(row.is_array() && static_cast<int64_t>(row.size()) == num_experts,
             "{}: {} is not an array of E = {} counts", name, where, num_experts);
  for (size_t e = 0; e < row.size(); ++e) {
    const json& v = row[e];
    ISER_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0,
               "{}: {}[{}] = {} is not a non-negative integer", name, where, e, describe(v));
    out.push_back(v.get<int64_t>());
  }
}

}  // namespace

TraceData parse_sglang_trace(std::string_view text, std::string_view name,
                             const TraceOptions& options) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ISER_CHECK(!doc.is_discarded(), "{}: not valid JSON", name);
  ISER_CHECK(doc.is_object(), "{}: top level is a JSON {}, expected an object", name,
             doc.type_name());
  const auto lc = doc.find("logical_count");
  ISER_CHECK(lc != doc.end() && lc->is_array() && !lc->empty(),
             "{}: logical_count is missing or not a non-empty array", name);
  // [L][E] or [I][L][E]: depth decided by the first element.
  const bool per_iteration =
      lc->front().is_array() && !lc->front().empty() && lc->front().front().is_array();
  const json& first_layer_set = per_iteration ? lc->front() : *lc;
  ISER_CHECK(
      first_layer_set.is_array() && !first_layer_set.empty() && first_layer_set.front().is_array(),
      "{}: logical_count is not [L][E] or [I][L][E]", name);
  const auto file_e = static_cast<int64_t>(first_layer_set.front().size());
  const auto num_layers = static_cast<int64_t>(first_layer_set.size());
  TraceOptions opts = options;
  if (!opts.num_experts) {
    const auto declared = json_int(doc, {"num_experts", "num_logical_experts"}, name);
    ISER_CHECK(!declared || *declared == file_e,
               "{}: num_experts = {} but logical_count rows have {} entries", name,
               declared.value_or(0), file_e);
    opts.num_experts = file_e;  // the count rows' length is E (one column per logical expert)
  }
  TraceData data;
  auto& meta = data.metadata;
  meta.source = std::string(name);
  meta.num_experts = trace::resolve_num_experts(name, opts, file_e, "num_experts");
  meta.top_k = trace::resolve_top_k(name, opts, json_int(doc, {"top_k"}, name), "top_k");
  ISER_CHECK(num_layers >= 1 && num_layers <= trace::kMaxTraceLayers,
             "{}: logical_count has {} layers, expected 1..{}", name, num_layers,
             trace::kMaxTraceLayers);
  meta.num_layers = static_cast<int>(num_layers);
  meta.model = json_string(doc, {"model", "model_path"});
  meta.dataset = json_string(doc, {"dataset"});
  std::vector<int64_t> counts;
  const auto read_layers = [&](const json& layers, std::string_view where) {
    ISER_CHECK(layers.is_array() && static_cast<int64_t>(layers.size()) == num_layers,
               "{}: {} is not an array of L = {} layers", name, where, num_layers);
    for (size_t l = 0; l < layers.size(); ++l) {
      append_count_row(layers[l], meta.num_experts, name, fmt::format("{}[{}]", where, l), counts);
    }
  };
  if (per_iteration) {
    for (size_t i = 0; i < lc->size(); ++i) {
      read_layers((*lc)[i], fmt::format("logical_count[{}]", i));
    }
    data.kind = TraceKind::kIterationCounts;
    data.num_iterations = static_cast<int64_t>(lc->size());
    data.iteration_counts = std::move(counts);
  } else {
    read_layers(*lc, "logical_count");
    data.kind = TraceKind::kHistograms;
    data.categories.emplace_back();
    data.histograms.push_back(std::move(counts));
  }
  data.validate(name);
  return data;
}

TraceData parse_csv_histograms(std::string_view text, std::string_view name,
                               const TraceOptions& options) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end + 1;
    if (!line.empty()) lines.push_back(line);
  }
  ISER_CHECK(!lines.empty(), "{}: empty CSV", name);
  const auto split = [](std::string_view line) {
    std::vector<std::string_view> cells;
    size_t start = 0;
    while (true) {
      const size_t comma = line.find(',', start);
      cells.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return cells;
  };
  const auto header = split(lines[0]);
  ISER_CHECK(header.size() >= 2 && header[0] == "layer",
             "{}:1: header must be 'layer,e0,...,e<E-1>', got '{}'", name, lines[0].substr(0, 80));
  const auto file_e = static_cast<int64_t>(header.size() - 1);
  for (int64_t e = 0; e < file_e; ++e) {
    ISER_CHECK(header[e + 1] == fmt::format("e{}", e), "{}:1: column {} is '{}', expected 'e{}'",
               name, e + 1, header[e + 1], e);
  }
  ISER_CHECK(!options.num_experts || *options.num_experts == file_e,
             "{}: header has E = {} expert columns but num_experts = {} was requested", name,
             file_e, options.num_experts.value_or(0));
  TraceOptions opts = options;
  opts.num_experts = file_e;
  TraceData data;
  data.kind = TraceKind::kHistograms;
  auto& meta = data.metadata;
  meta.source = std::string(name);
  meta.num_experts = trace::resolve_num_experts(name, opts, file_e, "E");
  meta.top_k = trace::resolve_top_k(name, options, std::nullopt, "top_k (not stored in CSV)");
  const auto num_layers = static_cast<int64_t>(lines.size() - 1);
  ISER_CHECK(num_layers >= 1 && num_layers <= trace::kMaxTraceLayers,
             "{}: {} layer rows, expected 1..{}", name, num_layers, trace::kMaxTraceLayers);
  meta.num_layers = static_cast<int>(num_layers);
  std::vector<int64_t> counts;
  counts.reserve(static_cast<size_t>(num_layers * file_e));
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t line_no = l + 2;
    const auto cells = split(lines[l + 1]);
    ISER_CHECK(static_cast<int64_t>(cells.size()) == file_e + 1,
               "{}:{}: {} cells, expected {} (layer + E counts)", name, line_no, cells.size(),
               file_e + 1);
    const auto layer_id = trace::parse_decimal(cells[0]);
    ISER_CHECK(layer_id == l, "{}:{}: layer column is '{}', expected {} (rows in layer order)",
               name, line_no, cells[0], l);
    for (int64_t e = 0; e < file_e; ++e) {
      const auto v = trace::parse_decimal(cells[e + 1]);
      ISER_CHECK(v && *v >= 0, "{}:{}: column e{} = '{}' is not a non-negative integer", name,
                 line_no, e, cells[e + 1]);
      counts.push_back(*v);
    }
  }
  data.categories.emplace_back();
  data.histograms.push_back(std::move(counts));
  data.validate(name);
  return data;
}

}  // namespace iser
