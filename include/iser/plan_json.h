// JSON forms of count matrices and plans (the `iser plan` formats), reusable by any tool.
//
//   counts: {"num_ranks": P, "num_experts": E, "counts": [[E ints] x P]}
//   plan:   {"T", "num_ranks", "num_experts", "num_slots", "owner_uses_home_slot", "loads": [P],
//            "broadcasts": [{"expert", "owner", "level", "group_begin", "group_size", "helper",
//                            "mode": "owner-direct"|"sami"|"p2p", "resident", "quota": [P]}]}
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "iser/counts.h"
#include "iser/plan.h"

namespace iser {

// Throws iser::Error naming `source` (a file name), the field and the offending value.
CountMatrix counts_from_json(const nlohmann::json& j, std::string_view source);
nlohmann::ordered_json counts_to_json(const CountMatrix& counts);

nlohmann::ordered_json plan_to_json(const Plan& plan);
// Reads what plan_to_json writes; throws iser::Error naming `source`, the field and the value.
Plan plan_from_json(const nlohmann::json& j, std::string_view source);

}  // namespace iser
