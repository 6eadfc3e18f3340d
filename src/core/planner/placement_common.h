// Internal to the planner: the part of placement shared by HALO-Q and iser.
#pragma once

#include <cstdint>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/planner.h"
#include "iser/topology.h"

namespace iser {

// Checks the counts (shape, no negative count, total <= kMaxPlannerRoutes), then writes ws.hist,
// plan.{num_ranks, num_experts, num_slots, target, loads = home loads}; returns T.
int32_t prepare_loads(const Topology& topo, const CountMatrix& counts, PlannerWorkspace& ws,
                      Plan& plan);

// True if options.previous holds a broadcast of `expert` on the same level and group: a new one
// there would be resident (no bytes move), so min_move does not apply to it.
bool matches_previous(const HaloQOptions& options, int32_t expert, int32_t level,
                      int32_t group_begin, int32_t group_size);

// HALO-Q placement (§4.2) after prepare_loads: ws.hist and plan.{target, loads = home loads}
// must be set; appends the broadcasts to `plan`.
void place_prepared(const Topology& topo, const HaloQOptions& options, PlannerWorkspace& ws,
                    Plan& plan);

}  // namespace iser
