// Loads implied by a plan with quotas: home loads, with every broadcast expert's routes replaced
// by its quotas (what the validator recomputes). Shared by the quota-based baselines.
#pragma once

#include <cstdint>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser {

inline std::vector<int32_t> loads_from_quotas(const Topology& topo, const CountMatrix& counts,
                                              const std::vector<Broadcast>& broadcasts) {
  const auto hist = counts.histogram();
  std::vector<int64_t> loads = counts.home_loads(topo);
  std::vector<bool> moved(topo.num_experts, false);
  for (const Broadcast& b : broadcasts) {
    if (!moved[b.expert]) loads[b.owner] -= hist[b.expert];
    moved[b.expert] = true;
    for (int r = 0; r < topo.num_ranks; ++r) loads[r] += b.quota[r];
  }
  return {loads.begin(), loads.end()};
}

}  // namespace iser
