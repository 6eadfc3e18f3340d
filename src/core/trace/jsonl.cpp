// JSONL per-token routing (docs/design.md §8). Two row layouts are accepted, mixed freely:
//   {"layer": l, "topk_ids" | "experts": [k ids], "token_idx": t, "req_id" | "problem_id" |
//    "request_id": r, ...}                          one row per (token, layer)
//   {"topk_ids": [[k ids] x L], "token_idx": t, "req_id": r}   one row per token, all layers
// An optional first line {"type": "meta", "num_experts": E, "top_k": k, "model_id": ...} supplies
// E and k (TraceOptions override them); rows may carry "type": "route". Tokens are joined on
// (request, token_idx) (token_idx defaults to the row's ordinal within its request and layer),
// ordered by request (first appearance) then token_idx; layer ids are mapped to 0..L-1 in
// ascending order. Tokens missing from some layer are dropped and counted in skipped_tokens.
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "common.h"
#include "iser/error.h"
#include "iser/trace.h"

namespace iser {
namespace {

using nlohmann::json;
using trace::describe;

constexpr int64_t kMaxLayerId = 1 << 20;

struct Row {
  int64_t token_key;  // index into the token table
  int64_t layer_id;
  size_t ids_offset;  // k ids in Parser::ids
};

struct TokenKey {
  int64_t request_idx;
  int64_t token_idx;
  bool operator==(const TokenKey&) const = default;
};
struct TokenKeyHash {
  size_t operator()(const TokenKey& k) const {
    const uint64_t mixed = static_cast<uint64_t>(k.request_idx) * 0x9e3779b97f4a7c15ULL ^
                           static_cast<uint64_t>(k.token_idx);
    return std::hash<uint64_t>()(mixed);
  }
};

const json* find_any(const json& row, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    const auto it = row.find(key);
    if (it != row.end()) return &*it;
  }
  return nullptr;
}

class Parser {
 public:
  Parser(std::string_view name, const TraceOptions& options) : name_(name), options_(options) {}

  TraceData run(std::string_view text);

 private:
  void parse_meta(const json& row, int64_t line_no);
  void parse_route(const json& row, int64_t line_no);
  void read_ids(const json& ids, int64_t line_no, std::vector<int32_t>& out);
  bool looks_like_profiling(const json& row);
  void ensure_shape(int64_t line_no);
  TraceData assemble();

  std::string name_;
  const TraceOptions& options_;
  std::optional<int64_t> meta_experts_;
  std::optional<int64_t> meta_top_k_;
  std::string model_;
  std::string dataset_;
  bool shape_ready_ = false;
  int num_experts_ = 0;
  int top_k_ = 0;
  int64_t route_rows_ = 0;
  int64_t skipped_rows_ = 0;
  int64_t profile_rows_ = 0;
  bool profile_run_open_ = true;
  std::vector<int32_t> profile_ids_;

  std::unordered_map<std::string, int64_t> requests_;
  std::unordered_map<TokenKey, int64_t, TokenKeyHash> tokens_;
  std::vector<TokenKey> token_keys_;
  std::map<std::pair<int64_t, int64_t>, int64_t> ordinals_;  // (request, layer) -> next token_idx
  std::vector<Row> rows_;
  std::vector<int32_t> ids_;
};

void Parser::parse_meta(const json& row, int64_t line_no) {
  ISER_CHECK(route_rows_ == 0 && !meta_experts_ && !meta_top_k_,
             "{}:{}: a meta line must come first and only once", name_, line_no);
  const auto get_int = [&](const char* key) -> std::optional<int64_t> {
    const auto it = row.find(key);
    if (it == row.end()) return std::nullopt;
    ISER_CHECK(it->is_number_integer(), "{}:{}: meta field {} = {} is not an integer", name_,
               line_no, key, describe(*it));
    return it->get<int64_t>();
  };
  meta_experts_ = get_int("num_experts");
  meta_top_k_ = get_int("top_k");
  if (const json* m = find_any(row, {"model_id", "model"}); m && m->is_string()) {
    model_ = m->get<std::string>();
  }
  if (const json* d = find_any(row, {"dataset"}); d && d->is_string()) {
    dataset_ = d->get<std::string>();
  }
}

void Parser::ensure_shape(int64_t line_no) {
  if (shape_ready_) return;
  const std::string where = fmt::format("{} (line {})", name_, line_no);
  num_experts_ =
      trace::resolve_num_experts(where, options_, meta_experts_, "the meta line's num_experts");
  top_k_ = trace::resolve_top_k(where, options_, meta_top_k_, "the meta line's top_k");
  shape_ready_ = true;
}

void Parser::read_ids(const json& ids, int64_t line_no, std::vector<int32_t>& out) {
  ISER_CHECK(ids.is_array() && static_cast<int64_t>(ids.size()) == top_k_,
             "{}:{}: expert list {} is not an array of top_k = {} ids", name_, line_no,
             describe(ids), top_k_);
  for (const auto& v : ids) {
    ISER_CHECK(v.is_number_integer(), "{}:{}: expert id {} is not an integer", name_, line_no,
               describe(v));
    const auto e = v.get<int64_t>();
    ISER_CHECK(e >= -1 && e < num_experts_,
               "{}:{}: expert id {} outside [-1, {}) (num_experts = {})", name_, line_no, e,
               num_experts_, num_experts_);
    out.push_back(static_cast<int32_t>(e));
  }
}

// vLLM's start-up profiling batch: equal weights (1/k) and one constant id list.
bool Parser::looks_like_profiling(const json& row) {
  const json* ids = find_any(row, {"topk_ids", "experts"});
  const json* weights = find_any(row, {"topk_weights", "gating_probs"});
  if (ids == nullptr || weights == nullptr || !weights->is_array() || !ids->is_array() ||
      weights->empty() || weights->size() != ids->size()) {
    return false;
  }
  for (const auto& w : *weights) {
    if (!w.is_number() ||
        std::abs(w.get<double>() - 1.0 / static_cast<double>(weights->size())) > 1e-6) {
      return false;
    }
  }
  std::vector<int32_t> current;
  for (const auto& v : *ids) {
    if (!v.is_number_integer()) return false;
    current.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  if (profile_ids_.empty()) profile_ids_ = current;
  return current == profile_ids_;
}

void Parser::parse_route(const json& row, int64_t line_no) {
  ++route_rows_;
  if (route_rows_ <= options_.skip_rows) {
    ++skipped_rows_;
    return;
  }
  if (options_.skip_profile_rows && profile_run_open_) {
    if (looks_like_profiling(row)) {
      ++profile_rows_;
      return;
    }
    profile_run_open_ = false;
  }
  ensure_shape(line_no);

  const json* ids = find_any(row, {"topk_ids", "experts"});
  ISER_CHECK(ids != nullptr, "{}:{}: row lacks topk_ids / experts", name_, line_no);

  std::string request = "-";
  if (const json* r = find_any(row, {"req_id", "request_id", "problem_id"}); r != nullptr) {
    ISER_CHECK(r->is_string() || r->is_number_integer(),
               "{}:{}: request id {} is neither a string nor an integer", name_, line_no,
               describe(*r));
    request = r->dump();  // a string or an integer: short and unambiguous
  }
  const auto [req_it, new_request] =
      requests_.emplace(request, static_cast<int64_t>(requests_.size()));
  const int64_t request_idx = req_it->second;

  const bool all_layers = ids->is_array() && !ids->empty() && ids->front().is_array();
  const json* layer = find_any(row, {"layer"});
  ISER_CHECK(!(all_layers && layer != nullptr), "{}:{}: row has both 'layer' and nested id lists",
             name_, line_no);
  int64_t first_layer = 0;
  if (layer != nullptr) {
    ISER_CHECK(layer->is_number_integer() && layer->get<int64_t>() >= 0 &&
                   layer->get<int64_t>() <= kMaxLayerId,
               "{}:{}: layer {} is not an integer in [0, {}]", name_, line_no, describe(*layer),
               kMaxLayerId);
    first_layer = layer->get<int64_t>();
  }
  const int64_t num_layers_here = all_layers ? static_cast<int64_t>(ids->size()) : 1;
  ISER_CHECK(num_layers_here <= trace::kMaxTraceLayers, "{}:{}: {} layers in one row, limit {}",
             name_, line_no, num_layers_here, trace::kMaxTraceLayers);

  int64_t token_idx = 0;
  if (const json* t = find_any(row, {"token_idx"}); t != nullptr) {
    ISER_CHECK(t->is_number_integer(), "{}:{}: token_idx {} is not an integer", name_, line_no,
               describe(*t));
    token_idx = t->get<int64_t>();
  } else {
    token_idx = ordinals_[{request_idx, first_layer}]++;
  }
  const TokenKey key{request_idx, token_idx};
  const auto [tok_it, new_token] = tokens_.emplace(key, static_cast<int64_t>(token_keys_.size()));
  if (new_token) token_keys_.push_back(key);

  for (int64_t l = 0; l < num_layers_here; ++l) {
    const size_t offset = ids_.size();
    read_ids(all_layers ? (*ids)[static_cast<size_t>(l)] : *ids, line_no, ids_);
    rows_.push_back({tok_it->second, first_layer + l, offset});
  }
}

TraceData Parser::run(std::string_view text) {
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    ISER_CHECK(!row.is_discarded(), "{}:{}: not valid JSON", name_, line_no);
    ISER_CHECK(row.is_object(), "{}:{}: row is a JSON {}, expected an object", name_, line_no,
               row.type_name());
    const auto type = row.find("type");
    if (type != row.end()) {
      ISER_CHECK(type->is_string(), "{}:{}: field 'type' is not a string", name_, line_no);
      const auto t = type->get<std::string>();
      if (t == "meta") {
        parse_meta(row, line_no);
        continue;
      }
      ISER_CHECK(t == "route", "{}:{}: unknown row type '{}'", name_, line_no, t);
    }
    if (dataset_.empty()) {
      if (const auto d = row.find("dataset"); d != row.end() && d->is_string()) {
        dataset_ = d->get<std::string>();
      }
    }
    parse_route(row, line_no);
  }
  return assemble();
}

TraceData Parser::assemble() {
  ISER_CHECK(!rows_.empty(), "{}: no route rows (after skipping {} rows)", name_,
             skipped_rows_ + profile_rows_);
  std::vector<int64_t> layer_ids;
  for (const Row& r : rows_) layer_ids.push_back(r.layer_id);
  std::sort(layer_ids.begin(), layer_ids.end());
  layer_ids.erase(std::unique(layer_ids.begin(), layer_ids.end()), layer_ids.end());
  ISER_CHECK(static_cast<int64_t>(layer_ids.size()) <= trace::kMaxTraceLayers,
             "{}: {} distinct layers, limit {}", name_, layer_ids.size(), trace::kMaxTraceLayers);
  const auto num_layers = static_cast<int64_t>(layer_ids.size());
  const auto layer_index = [&](int64_t id) {
    return std::lower_bound(layer_ids.begin(), layer_ids.end(), id) - layer_ids.begin();
  };

  // A token is kept only when every layer has it. Memory stays O(rows): no token x layer table.
  const auto num_keys = static_cast<int64_t>(token_keys_.size());
  std::vector<int32_t> layers_seen(static_cast<size_t>(num_keys), 0);
  {
    std::unordered_set<TokenKey, TokenKeyHash> cells;  // (token, layer index) pairs
    cells.reserve(rows_.size());
    for (const Row& r : rows_) {
      if (!cells.insert({r.token_key, layer_index(r.layer_id)}).second) {
        const TokenKey& k = token_keys_[r.token_key];
        throw Error(fmt::format("{}: token (request #{}, token_idx {}) appears twice in layer {}",
                                name_, k.request_idx, k.token_idx, r.layer_id));
      }
      ++layers_seen[r.token_key];
    }
  }
  std::vector<int64_t> kept;
  for (int64_t key = 0; key < num_keys; ++key) {
    if (layers_seen[key] == num_layers) kept.push_back(key);
  }
  std::sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) {
    const TokenKey& ka = token_keys_[a];
    const TokenKey& kb = token_keys_[b];
    return std::pair(ka.request_idx, ka.token_idx) < std::pair(kb.request_idx, kb.token_idx);
  });
  std::vector<int64_t> position(static_cast<size_t>(num_keys), -1);
  for (size_t t = 0; t < kept.size(); ++t) position[kept[t]] = static_cast<int64_t>(t);
  const int64_t incomplete = num_keys - static_cast<int64_t>(kept.size());

  TraceData data;
  data.kind = TraceKind::kTokens;
  auto& meta = data.metadata;
  meta.source = name_;
  meta.model = model_;
  meta.dataset = dataset_;
  meta.num_experts = num_experts_;
  meta.top_k = top_k_;
  meta.num_layers = static_cast<int>(num_layers);
  meta.num_tokens = static_cast<int64_t>(kept.size());
  meta.skipped_tokens = incomplete + skipped_rows_ + profile_rows_;
  std::vector<std::string> notes;
  if (incomplete > 0) {
    notes.push_back(fmt::format("dropped {} tokens missing from some layer", incomplete));
  }
  if (skipped_rows_ > 0) notes.push_back(fmt::format("skipped {} leading rows", skipped_rows_));
  if (profile_rows_ > 0) {
    notes.push_back(fmt::format("skipped {} leading profiling rows (equal weights, constant ids)",
                                profile_rows_));
  }
  if (layer_ids.front() != 0 || layer_ids.back() != num_layers - 1) {
    notes.push_back(
        fmt::format("layer ids {} mapped to 0..{}", fmt::join(layer_ids, ","), num_layers - 1));
  }
  meta.notes = fmt::format("{}", fmt::join(notes, "; "));

  const auto T = static_cast<int64_t>(kept.size());
  data.topk_ids.resize(static_cast<size_t>(num_layers * T * top_k_));
  data.request_ids.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) data.request_ids[t] = token_keys_[kept[t]].request_idx;
  for (const Row& row : rows_) {
    const int64_t t = position[row.token_key];
    if (t < 0) continue;
    std::copy_n(ids_.begin() + static_cast<ptrdiff_t>(row.ids_offset), top_k_,
                data.topk_ids.begin() + (layer_index(row.layer_id) * T + t) * top_k_);
  }
  data.validate(name_);
  return data;
}

}  // namespace

TraceData parse_jsonl_trace(std::string_view text, std::string_view name,
                            const TraceOptions& options) {
  ISER_CHECK(options.skip_rows >= 0, "{}: skip_rows = {} is negative", name, options.skip_rows);
  return Parser(name, options).run(text);
}

}  // namespace iser
