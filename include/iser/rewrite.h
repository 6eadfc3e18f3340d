// Route rewrite (DESIGN §4.5): local first, north-west corner. Shared by every policy whose plan
// carries quotas (HALO-Q family and the point-to-point baselines).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser {

// Count-level rewrite: where every (source rank, expert) route runs.
std::vector<RouteFlow> rewrite_flows(const Topology& topo, const CountMatrix& counts,
                                     const Plan& plan);

// Token-level rewrite of one rank: topk_ids [num_tokens, top_k] (flattened, -1 = none) to
// global slot ids (DESIGN §3: rank * (H + S) + local slot); -1 stays -1.
void rewrite_tokens(const Topology& topo, const CountMatrix& counts, const Plan& plan, int rank_idx,
                    std::span<const int32_t> topk_ids, int top_k, std::span<int32_t> slot_ids);

}  // namespace iser
