// Route rewrite (docs/design.md §4.5): local first, north-west corner. Shared by every policy whose
// plan carries quotas (HALO-Q family and the point-to-point baselines).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser {

// Several broadcasts of one expert (point-to-point replicas, iser's disjoint groups) combine:
// a rank's quota is the sum over them, the north-west corner runs once per expert, and a rank
// computes all its routes of the expert in one slot: its home slot if it is the owner and the
// plan says owner_uses_home_slot, else the helper slot of the first broadcast (plan order) whose
// group holds it, else (an owner outside every group) the home slot.

// Count-level rewrite: where every (source rank, expert) route runs, listed by expert, then
// source, then destination. Throws iser::Error when quotas do not add up to the counts.
std::vector<RouteFlow> rewrite_flows(const Topology& topo, const CountMatrix& counts,
                                     const Plan& plan);

// Token-level rewrite of one rank: topk_ids [num_tokens, top_k] (flattened, -1 = none) to
// global slot ids (docs/design.md §3: rank * (H + S) + local slot); -1 stays -1. The k-th route of
// expert e on the rank (flattened [token, k] order) goes to residual destinations d < rank first,
// then the rank itself, then d > rank, in the amounts of rewrite_flows. `counts` must hold the
// rank's row exactly (checked).
void rewrite_tokens(const Topology& topo, const CountMatrix& counts, const Plan& plan, int rank_idx,
                    std::span<const int32_t> topk_ids, int top_k, std::span<int32_t> slot_ids);

}  // namespace iser
