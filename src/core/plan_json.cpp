#include "iser/plan_json.h"

#include <limits>
#include <string>

#include "iser/error.h"
#include "iser/topology.h"

namespace iser {
namespace {

using nlohmann::json;

const json& field(const json& j, const char* name, std::string_view source) {
  ISER_CHECK(j.is_object(), "{}: expected a JSON object, got {}", source, j.type_name());
  const auto it = j.find(name);
  ISER_CHECK(it != j.end(), "{}: missing field '{}'", source, name);
  return *it;
}

int32_t as_int32(const json& v, std::string_view source, const std::string& what) {
  ISER_CHECK(v.is_number_integer(), "{}: field '{}' must be an integer, got {}", source, what,
             v.dump());
  const int64_t x = v.get<int64_t>();
  ISER_CHECK(x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max(),
             "{}: field '{}' = {} does not fit in 32 bits", source, what, x);
  return static_cast<int32_t>(x);
}

std::vector<int32_t> int_array(const json& v, size_t size, std::string_view source,
                               const std::string& what) {
  ISER_CHECK(v.is_array(), "{}: field '{}' must be an array, got {}", source, what, v.type_name());
  ISER_CHECK(v.size() == size, "{}: field '{}' has {} entries, expected {}", source, what, v.size(),
             size);
  std::vector<int32_t> out(size);
  for (size_t i = 0; i < size; ++i) {
    out[i] = as_int32(v[i], source, fmt::format("{}[{}]", what, i));
  }
  return out;
}

TransportMode mode_from(const json& v, std::string_view source, const std::string& what) {
  ISER_CHECK(v.is_string(), "{}: field '{}' must be a string", source, what);
  const std::string s = v.get<std::string>();
  for (const auto mode :
       {TransportMode::kOwnerDirect, TransportMode::kSami, TransportMode::kPointToPoint}) {
    if (s == to_string(mode)) return mode;
  }
  throw Error(
      fmt::format("{}: field '{}' = '{}' is not owner-direct, sami or p2p", source, what, s));
}

}  // namespace

CountMatrix counts_from_json(const json& j, std::string_view source) {
  const int32_t P = as_int32(field(j, "num_ranks", source), source, "num_ranks");
  const int32_t E = as_int32(field(j, "num_experts", source), source, "num_experts");
  ISER_CHECK(P >= 1 && P <= kMaxRanks, "{}: field 'num_ranks' = {} out of range [1, {}]", source, P,
             kMaxRanks);
  ISER_CHECK(E >= 1 && E <= kMaxExperts, "{}: field 'num_experts' = {} out of range [1, {}]",
             source, E, kMaxExperts);
  const json& rows = field(j, "counts", source);
  ISER_CHECK(rows.is_array(), "{}: field 'counts' must be an array of {} rows", source, P);
  ISER_CHECK(rows.size() == static_cast<size_t>(P),
             "{}: field 'counts' has {} rows, expected num_ranks = {}", source, rows.size(), P);
  CountMatrix counts(P, E);
  for (int s = 0; s < P; ++s) {
    const auto row = int_array(rows[s], E, source, fmt::format("counts[{}]", s));
    for (int e = 0; e < E; ++e) {
      ISER_CHECK(row[e] >= 0, "{}: field 'counts[{}][{}]' = {} is negative", source, s, e, row[e]);
      counts.at(s, e) = row[e];
    }
  }
  return counts;
}

nlohmann::ordered_json counts_to_json(const CountMatrix& counts) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int s = 0; s < counts.num_ranks(); ++s) {
    const auto row = counts.row(s);
    rows.push_back(std::vector<int32_t>(row.begin(), row.end()));
  }
  return nlohmann::ordered_json{{"num_ranks", counts.num_ranks()},
                                {"num_experts", counts.num_experts()},
                                {"counts", std::move(rows)}};
}

nlohmann::ordered_json plan_to_json(const Plan& plan) {
  nlohmann::ordered_json broadcasts = nlohmann::ordered_json::array();
  for (const Broadcast& b : plan.broadcasts) {
    broadcasts.push_back(nlohmann::ordered_json{{"expert", b.expert},
                                                {"owner", b.owner},
                                                {"level", b.level},
                                                {"group_begin", b.group_begin},
                                                {"group_size", b.group_size},
                                                {"helper", b.helper},
                                                {"mode", std::string(to_string(b.mode))},
                                                {"resident", b.resident},
                                                {"quota", b.quota}});
  }
  return nlohmann::ordered_json{{"T", plan.target},
                                {"num_ranks", plan.num_ranks},
                                {"num_experts", plan.num_experts},
                                {"num_slots", plan.num_slots},
                                {"owner_uses_home_slot", plan.owner_uses_home_slot},
                                {"loads", plan.loads},
                                {"broadcasts", std::move(broadcasts)}};
}

Plan plan_from_json(const json& j, std::string_view source) {
  Plan plan;
  plan.target = as_int32(field(j, "T", source), source, "T");
  plan.num_ranks = as_int32(field(j, "num_ranks", source), source, "num_ranks");
  plan.num_experts = as_int32(field(j, "num_experts", source), source, "num_experts");
  plan.num_slots = as_int32(field(j, "num_slots", source), source, "num_slots");
  ISER_CHECK(plan.num_ranks >= 1 && plan.num_ranks <= kMaxRanks,
             "{}: field 'num_ranks' = {} out of range [1, {}]", source, plan.num_ranks, kMaxRanks);
  if (j.contains("owner_uses_home_slot")) {
    const json& v = j["owner_uses_home_slot"];
    ISER_CHECK(v.is_boolean(), "{}: field 'owner_uses_home_slot' must be a boolean", source);
    plan.owner_uses_home_slot = v.get<bool>();
  }
  const size_t P = static_cast<size_t>(plan.num_ranks);
  plan.loads = int_array(field(j, "loads", source), P, source, "loads");
  const json& list = field(j, "broadcasts", source);
  ISER_CHECK(list.is_array(), "{}: field 'broadcasts' must be an array", source);
  for (size_t i = 0; i < list.size(); ++i) {
    const json& o = list[i];
    const std::string at = fmt::format("broadcasts[{}]", i);
    auto get = [&](const char* name) {
      return as_int32(field(o, name, source), source, at + "." + name);
    };
    Broadcast b;
    b.expert = get("expert");
    b.owner = get("owner");
    b.level = get("level");
    b.group_begin = get("group_begin");
    b.group_size = get("group_size");
    b.helper = get("helper");
    b.mode = mode_from(field(o, "mode", source), source, at + ".mode");
    if (o.contains("resident")) {
      ISER_CHECK(o["resident"].is_boolean(), "{}: field '{}.resident' must be a boolean", source,
                 at);
      b.resident = o["resident"].get<bool>();
    }
    b.quota = int_array(field(o, "quota", source), P, source, at + ".quota");
    plan.broadcasts.push_back(std::move(b));
  }
  return plan;
}

}  // namespace iser
