// Helpers shared by the LSA team tests.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "iser/policy.h"
#include "iser/validator.h"

namespace iser::test_util {

// Every policy that plans per invocation from counts alone (no trace, no model).
inline std::vector<std::string> team_policies() {
  return {"halo-q",         "owner-home", "absorb",      "resident", "halo-q-owner-in",   "iser",
          "iser-stateless", "p2p",        "p2p-limited", "all-rank", "all-rank-balanced", "none"};
}

// Empty when `result` validates under the policy's own options and, where the policy keeps
// teams (all but all-rank*), every broadcast's hosts lie in the owner's team; else the first
// failure.
inline std::string team_plan_failure(const Topology& topo, const CountMatrix& counts,
                                     const Policy& policy, const PolicyResult& result) {
  const ValidationOptions options = policy.validation();
  if (options.enabled) {
    const auto violations = validate_plan(topo, counts, result.plan, options);
    if (!violations.empty()) return fmt::format("{}: {}", policy.name(), violations.front());
  }
  if (!options.require_team_local) return "";
  for (const Broadcast& b : result.plan.broadcasts) {
    const int team = topo.team_of(b.owner);
    for (int r = b.group_begin; r < b.group_begin + b.group_size; ++r) {
      if (topo.team_of(r) != team) {
        return fmt::format("{}: expert {} (owner {}, team {}) has group [{}, {}) with rank {}",
                           policy.name(), b.expert, b.owner, team, b.group_begin,
                           b.group_begin + b.group_size, r);
      }
    }
  }
  return "";
}

}  // namespace iser::test_util
