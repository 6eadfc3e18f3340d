// SGLang expert-distribution dumps (python/sglang/srt/eplb/expert_distribution.py) and other
// torch.save files: stat mode {rank, logical_count [buffer, L, E], ...}; per_pass / per_token
// mode {records: [{forward_pass_id, rank, gatherer_key, global_physical_count [L, physical],
// (topk_ids_of_layer [L, T, c])}], last_physical_to_logical_map [L, physical]}, one file per rank;
// a dict of vLLM tensors. Layouts and how to get them: docs/data.md.
#include <algorithm>
#include <map>

#include <fmt/ranges.h>

#include "common.h"
#include "engines.h"
#include "iser/error.h"
#include "iser/trace.h"
#include "torch_file.h"

namespace iser {
namespace {

using trace::ExpertMap;
using trace::PyKind;
using trace::PyObject;
using trace::TorchFile;

const PyObject& field(const TorchFile& file, const PyObject& dict, std::string_view key,
                      PyKind kind, std::string_view where) {
  const auto idx = file.pickle.find(dict, key);
  ISER_CHECK(idx.has_value(), "{}: {} has no '{}'", file.name, where, key);
  const PyObject& v = file.at(*idx);
  ISER_CHECK(v.kind == kind, "{}: {}['{}'] is a {}, expected a {}", file.name, where, key,
             trace::py_kind_name(v.kind), trace::py_kind_name(kind));
  return v;
}

// Stat mode: the circular buffer of logical counts, already summed over ranks.
TraceData read_stat(const TorchFile& file, const PyObject& lc, const TraceOptions& options) {
  const std::string& name = file.name;
  ISER_CHECK(lc.shape.size() == 3, "{}: logical_count has shape {}, expected [buffer, L, E]", name,
             trace::shape_text(lc.shape));
  const int64_t rows = lc.shape[0], L = lc.shape[1], E = lc.shape[2];
  TraceData data;
  auto& meta = data.metadata;
  meta.source = name;
  ISER_CHECK(!options.num_experts || *options.num_experts == E,
             "{}: logical_count has E = {} but num_experts = {} was requested", name, E,
             options.num_experts.value_or(0));
  TraceOptions with_e = options;
  with_e.num_experts = E;
  meta.num_experts = trace::resolve_num_experts(name, with_e, E, "logical_count E");
  meta.top_k = trace::resolve_top_k(name, options, std::nullopt,
                                    "top_k (an SGLang stat dump does not record it)");
  ISER_CHECK(L >= 1 && L <= trace::kMaxTraceLayers, "{}: logical_count has L = {}", name, L);
  meta.num_layers = static_cast<int>(L);
  std::vector<int64_t> counts = file.read_integers(lc, "logical_count");
  const int64_t dropped = trace::drop_zero_rows(counts, static_cast<size_t>(L * E));
  ISER_CHECK(dropped < rows, "{}: all {} rows of logical_count are zero: nothing was recorded",
             name, rows);
  data.kind = TraceKind::kIterationCounts;
  data.num_iterations = rows - dropped;
  data.iteration_counts = std::move(counts);
  meta.notes =
      dropped > 0
          ? fmt::format("SGLang stat dump: {} forward pass(es), {} unused buffer row(s) dropped",
                        data.num_iterations, dropped)
          : fmt::format(
                "SGLang stat dump: the buffer of {} rows is full; rows kept in stored "
                "order (the dump does not record where a wrapped buffer starts)",
                rows);
  return data;
}

struct Record {
  int64_t pass = 0;
  int64_t rank = 0;
  std::vector<int64_t> physical;  // [L, physical]
  std::vector<int64_t> topk;      // [L, T, c] physical ids, per_token mode only
  int64_t num_tokens = 0;
  int64_t columns = 0;
};

struct DetailDump {
  std::string name;
  ExpertMap map;
  std::vector<Record> records;
  bool per_token = false;
};

DetailDump read_detail(const TorchFile& file, const PyObject& root, const TraceOptions& options) {
  const std::string& name = file.name;
  DetailDump dump;
  dump.name = name;
  const PyObject& map_t =
      field(file, root, "last_physical_to_logical_map", PyKind::kTensor, "the dump");
  ISER_CHECK(map_t.shape.size() == 2,
             "{}: last_physical_to_logical_map has shape {}, expected "
             "[L, physical]",
             name, trace::shape_text(map_t.shape));
  const int64_t L = map_t.shape[0], P = map_t.shape[1];
  dump.map = trace::make_expert_map(file.read_integers(map_t, "last_physical_to_logical_map"), L, P,
                                    fmt::format("{}: last_physical_to_logical_map", name));
  ISER_CHECK(!options.num_experts || *options.num_experts == dump.map.num_experts,
             "{}: last_physical_to_logical_map names E = {} logical experts but num_experts = {} "
             "was requested",
             name, dump.map.num_experts, options.num_experts.value_or(0));
  const PyObject& records = field(file, root, "records", PyKind::kList, "the dump");
  for (size_t i = 0; i < records.items.size(); ++i) {
    const std::string where = fmt::format("records[{}]", i);
    const PyObject& rec = file.at(records.items[i]);
    ISER_CHECK(rec.kind == PyKind::kDict, "{}: {} is a {}, expected a dict", name, where,
               trace::py_kind_name(rec.kind));
    Record r;
    r.pass = field(file, rec, "forward_pass_id", PyKind::kInt, where).integer;
    r.rank = field(file, rec, "rank", PyKind::kInt, where).integer;
    const PyObject& gpc = field(file, rec, "global_physical_count", PyKind::kTensor, where);
    ISER_CHECK(gpc.shape == std::vector<int64_t>({L, P}),
               "{}: {}.global_physical_count has shape {}, expected [L, physical] = [{}, {}]", name,
               where, trace::shape_text(gpc.shape), L, P);
    r.physical = file.read_integers(gpc, where + ".global_physical_count");
    if (const auto t = file.pickle.find(rec, "topk_ids_of_layer")) {
      const PyObject& ids = file.at(*t);
      ISER_CHECK(ids.kind == PyKind::kTensor && ids.shape.size() == 3 && ids.shape[0] == L &&
                     ids.shape[2] >= 1,
                 "{}: {}.topk_ids_of_layer is not a tensor [L = {}, T, columns]", name, where, L);
      r.num_tokens = ids.shape[1];
      r.columns = ids.shape[2];
      r.topk = file.read_integers(ids, where + ".topk_ids_of_layer");
      dump.per_token = true;
    }
    dump.records.push_back(std::move(r));
  }
  ISER_CHECK(!dump.records.empty(), "{}: records is empty: nothing was recorded", name);
  for (const auto& r : dump.records) {
    ISER_CHECK(!dump.per_token || r.columns > 0,
               "{}: forward pass {} lacks topk_ids_of_layer while other records have it", name,
               r.pass);
  }
  return dump;
}

// Records of all ranks, ordered by (forward pass, rank); every rank must hold every pass.
std::vector<const Record*> ordered_records(const std::vector<DetailDump>& dumps,
                                           std::vector<int64_t>& ranks) {
  std::map<std::pair<int64_t, int64_t>, const Record*> by_key;
  std::map<int64_t, std::vector<int64_t>> passes_of_rank;
  for (const auto& d : dumps) {
    for (const auto& r : d.records) {
      ISER_CHECK(by_key.emplace(std::pair{r.pass, r.rank}, &r).second,
                 "{}: forward pass {} of rank {} is recorded twice", d.name, r.pass, r.rank);
      passes_of_rank[r.rank].push_back(r.pass);
    }
  }
  for (auto& [rank, passes] : passes_of_rank) std::sort(passes.begin(), passes.end());
  const auto& first = passes_of_rank.begin()->second;
  for (const auto& [rank, passes] : passes_of_rank) {
    ISER_CHECK(passes == first,
               "{}: rank {} recorded {} forward passes, rank {} recorded {}: the rank files do "
               "not cover the same passes",
               dumps.front().name, rank, passes.size(), passes_of_rank.begin()->first,
               first.size());
    ranks.push_back(rank);
  }
  std::vector<const Record*> out;
  for (const auto& [key, r] : by_key) out.push_back(r);
  return out;
}

TraceData detail_to_trace(const std::vector<DetailDump>& dumps, std::string_view name,
                          const TraceOptions& options) {
  const DetailDump& first = dumps.front();
  for (const auto& d : dumps) {
    ISER_CHECK(d.map.logical == first.map.logical && d.map.num_physical == first.map.num_physical,
               "{}: last_physical_to_logical_map differs from {}'s", d.name, first.name);
    ISER_CHECK(d.per_token == first.per_token, "{}: per_token and per_pass dumps mixed", d.name);
  }
  const ExpertMap& map = first.map;
  std::vector<int64_t> ranks;
  const std::vector<const Record*> records = ordered_records(dumps, ranks);
  TraceData data;
  auto& meta = data.metadata;
  meta.source = std::string(name);
  meta.num_experts = map.num_experts;
  meta.num_layers = map.num_layers;
  const auto L = static_cast<size_t>(map.num_layers);
  if (!first.per_token) {
    meta.top_k = trace::resolve_top_k(name, options, std::nullopt,
                                      "top_k (an SGLang per_pass dump does not record it)");
    const auto P = ranks.size();
    const auto E = static_cast<size_t>(map.num_experts);
    data.kind = TraceKind::kIterationCounts;
    data.num_iterations = static_cast<int64_t>(records.size() / P);
    data.num_ranks = P > 1 ? static_cast<int>(P) : 0;
    data.iteration_counts.assign(records.size() * L * E, 0);
    // records are (pass, rank)-ordered: record n is iteration n / P, rank n % P.
    for (size_t n = 0; n < records.size(); ++n) {
      const auto logical = trace::physical_to_logical_counts(
          records[n]->physical, 1, map,
          fmt::format("{}: forward pass {} rank {}", name, records[n]->pass, records[n]->rank));
      const size_t i = n / P, r = n % P;
      for (size_t l = 0; l < L; ++l) {
        std::copy_n(
            logical.begin() + static_cast<std::ptrdiff_t>(l * E), E,
            data.iteration_counts.begin() + static_cast<std::ptrdiff_t>(((i * L + l) * P + r) * E));
      }
    }
    meta.notes = fmt::format("SGLang per_pass dump: {} forward pass(es) x {} rank(s)",
                             data.num_iterations, P);
    return data;
  }
  // per_token: ids padded with -1 to the recorder's column count; k = the used columns.
  int64_t used = 0;
  int64_t total_tokens = 0;
  for (const Record* r : records) {
    total_tokens += r->num_tokens;
    for (size_t i = 0; i < r->topk.size(); ++i) {
      if (r->topk[i] != -1) used = std::max(used, static_cast<int64_t>(i % r->columns) + 1);
    }
  }
  TraceOptions with_k = options;
  if (!with_k.top_k && used > 0) with_k.top_k = used;
  meta.top_k = trace::resolve_top_k(name, with_k, std::nullopt, "top_k (no id recorded)");
  const auto k = static_cast<size_t>(meta.top_k);
  meta.num_tokens = total_tokens;
  data.kind = TraceKind::kTokens;
  data.topk_ids.assign(L * static_cast<size_t>(total_tokens) * k, -1);
  size_t t0 = 0;
  for (const Record* r : records) {
    const auto T = static_cast<size_t>(r->num_tokens);
    const auto c = static_cast<size_t>(r->columns);
    for (size_t l = 0; l < L; ++l) {
      for (size_t t = 0; t < T; ++t) {
        for (size_t j = 0; j < c; ++j) {
          const int64_t id = r->topk[(l * T + t) * c + j];
          if (id == -1) continue;
          ISER_CHECK(id >= 0 && id < map.num_physical && j < k,
                     "{}: forward pass {} rank {}: topk_ids_of_layer[{}, {}, {}] = {} is not a "
                     "physical expert in [0, {}) within top_k = {}",
                     name, r->pass, r->rank, l, t, j, id, map.num_physical, k);
          data.topk_ids[(l * static_cast<size_t>(total_tokens) + t0 + t) * k + j] =
              map.at(static_cast<int>(l), id);
        }
      }
    }
    t0 += T;
  }
  meta.notes = fmt::format(
      "SGLang per_token dump: {} forward pass(es) x {} rank(s), top-{} of {} "
      "recorded columns, physical ids mapped to logical",
      records.size() / ranks.size(), ranks.size(), k, records.front()->columns);
  return data;
}

TraceData read_named_tensors(const TorchFile& file, const PyObject& root,
                             const TraceOptions& options) {
  std::vector<trace::NamedTensor> tensors;
  std::vector<std::string> keys;
  for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
    const PyObject& key = file.at(root.items[i]);
    const PyObject& value = file.at(root.items[i + 1]);
    if (key.kind != PyKind::kString) continue;
    keys.push_back(key.text);
    if (value.kind != PyKind::kTensor) continue;
    tensors.push_back({key.text, value.shape, file.read_integers(value, key.text)});
  }
  ISER_CHECK(!tensors.empty(),
             "{}: a dict without 'logical_count' (SGLang stat), 'records' (SGLang per_pass / "
             "per_token) or tensors (keys: {})",
             file.name, fmt::join(keys, ", "));
  return trace::read_vllm_tensors(tensors, {}, file.name, options);
}

}  // namespace

TraceData parse_torch_trace(std::string_view bytes, std::string_view name,
                            const TraceOptions& options) {
  const TorchFile file = trace::read_torch_file(bytes, name);
  const PyObject& root = file.root();
  ISER_CHECK(root.kind == PyKind::kDict, "{}: the saved object is a {}, expected a dict", name,
             trace::py_kind_name(root.kind));
  TraceData data;
  if (const auto lc = file.pickle.find(root, "logical_count")) {
    data = read_stat(file, file.at(*lc), options);
  } else if (file.pickle.find(root, "records")) {
    data = detail_to_trace({read_detail(file, root, options)}, name, options);
  } else {
    data = read_named_tensors(file, root, options);
  }
  data.validate(name);
  return data;
}

TraceData read_torch_dump_dir(const std::filesystem::path& directory, const TraceOptions& options) {
  const std::string dir = directory.string();
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().extension() == ".pt") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ISER_CHECK(!files.empty(), "{}: no .pt files", dir);
  std::vector<DetailDump> dumps;
  for (const auto& path : files) {
    const std::string bytes = trace::read_file_bytes(path);
    const TorchFile file = trace::read_torch_file(bytes, path.string());
    const PyObject& root = file.root();
    ISER_CHECK(root.kind == PyKind::kDict && file.pickle.find(root, "records"),
               "{}: not an SGLang per_pass / per_token dump (no 'records'); a directory is read "
               "as one such file per rank",
               path.string());
    dumps.push_back(read_detail(file, root, options));
  }
  TraceData data = detail_to_trace(dumps, dir, options);
  data.validate(dir);
  return data;
}

}  // namespace iser
