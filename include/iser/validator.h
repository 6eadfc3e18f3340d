// Plan validator: every invariant a plan must hold (docs/design.md §3-§4).
#pragma once

#include <string>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser {

struct ValidationOptions {
  // False for policies whose results are not per-invocation plans (oracle: no placement; static
  // EPLB: its own slot layout). Their flows are still checked by validate_flows.
  bool enabled = true;
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
  // With several LSA teams (lsa_size < P), every broadcast's hosts (group and owner) lie in one
  // team. `all-rank` turns this off: it copies to every rank and ignores teams.
  bool require_team_local = true;
};

// Returns one human-readable line per violated invariant; empty means the plan is valid.
std::vector<std::string> validate_plan(const Topology& topo, const CountMatrix& counts,
                                       const Plan& plan, const ValidationOptions& options = {});

// Flows must conserve routes: for every (source rank, expert) the routes sent to all hosts sum to
// c[s][e], every route count is positive and every rank index is in range.
std::vector<std::string> validate_flows(const CountMatrix& counts,
                                        const std::vector<RouteFlow>& flows);

// Throws iser::Error listing the first violations when the plan is invalid.
void check_plan(const Topology& topo, const CountMatrix& counts, const Plan& plan,
                const ValidationOptions& options = {});

}  // namespace iser
