// The policy registry: one table, in report order. Each policy lives in its own file under
// src/core/policies/ and exposes a factory declared in policies/factories.h.
#include <algorithm>
#include <functional>

#include "iser/error.h"
#include "iser/policy.h"
#include "policies/factories.h"

namespace iser {
namespace {

struct PolicyEntry {
  const char* name;
  std::function<std::unique_ptr<Policy>(const Topology&, const PolicyOptions&)> make;
};

const std::vector<PolicyEntry>& registry() {
  static const std::vector<PolicyEntry> kEntries = {
      {"none", make_none_policy},
      {"oracle", make_oracle_policy},
      {"halo-q", make_halo_q_policy},
      {"owner-home", make_owner_home_policy},
      {"absorb", make_absorb_policy},
      {"resident", make_resident_policy},
      {"halo-q-owner-in", make_halo_q_owner_in_policy},
      {"iser", make_iser_policy},
      {"iser-stateless", make_iser_stateless_policy},
      {"eplb", make_eplb_policy},
      {"eplb-window", make_eplb_window_policy},
      {"eplb-equal-mem", make_eplb_equal_mem_policy},
      {"eplb-oracle", make_eplb_oracle_policy},
      {"all-rank", make_all_rank_policy},
      {"all-rank-balanced", make_all_rank_balanced_policy},
      {"p2p", make_p2p_policy},
      {"p2p-limited", make_p2p_limited_policy},
  };
  return kEntries;
}

}  // namespace

std::vector<std::string> available_policies() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.emplace_back(entry.name);
  return names;
}

std::unique_ptr<Policy> make_policy(std::string_view name, const Topology& topo,
                                    const PolicyOptions& options) {
  const auto& entries = registry();
  const auto it = std::find_if(entries.begin(), entries.end(),
                               [&](const PolicyEntry& e) { return name == e.name; });
  if (it == entries.end()) {
    std::string known;
    for (const auto& entry : entries) {
      known += (known.empty() ? "" : ", ") + std::string(entry.name);
    }
    throw Error(fmt::format("unknown policy '{}' (known: {})", name, known));
  }
  return it->make(topo, options);
}

std::vector<RouteFlow> home_flows(const Topology& topo, const CountMatrix& counts) {
  std::vector<RouteFlow> flows;
  const auto data = counts.data();
  flows.reserve(static_cast<size_t>(
      std::count_if(data.begin(), data.end(), [](int32_t c) { return c > 0; })));
  for (int s = 0; s < counts.num_ranks(); ++s) {
    const auto row = counts.row(s);
    for (int e = 0; e < counts.num_experts(); ++e) {
      if (row[e] > 0) flows.push_back({s, e, topo.owner_of(e), row[e]});
    }
  }
  return flows;
}

}  // namespace iser
