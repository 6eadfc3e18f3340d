// Plan validator: every invariant a plan must hold (issue 2, DESIGN §3-§4).
#pragma once

#include <string>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser {

struct ValidationOptions {
  // Groups must be aligned groups of the topology (HALO-Q family). Point-to-point baselines
  // turn this off; their broadcasts carry kUnalignedLevel.
  bool require_aligned_groups = true;
  // Maximum broadcasts sourced by one owner; -1 = min(S, H) (HALO-Q), 0 = unlimited.
  int max_exports_per_owner = -1;
  // Each expert may be broadcast at most once (the reference policy never exports twice).
  bool unique_experts = false;
  // Plan loads equal home loads plus quotas. Static placements (eplb) turn this off: their loads
  // come from the placement's flows, which the plan's broadcasts do not describe.
  bool loads_from_quotas = true;
};

// Returns one human-readable line per violated invariant; empty means the plan is valid.
std::vector<std::string> validate_plan(const Topology& topo, const CountMatrix& counts,
                                       const Plan& plan, const ValidationOptions& options = {});

// Throws iser::Error listing the first violations when the plan is invalid.
void check_plan(const Topology& topo, const CountMatrix& counts, const Plan& plan,
                const ValidationOptions& options = {});

}  // namespace iser
