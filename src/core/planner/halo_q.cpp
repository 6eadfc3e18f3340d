// HALO-Q driver: the four planning stages in the order of docs/design.md §4.
#include "iser/planner.h"

namespace iser {

void plan_halo_q(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
                 PlannerWorkspace& ws, Plan& plan) {
  plan.owner_uses_home_slot = options.owner_home;
  place_broadcasts(topo, counts, options, ws, plan);
  color_slots(topo, plan, ws, options.previous);
  repair_quotas(topo, counts, plan, ws);
  assign_transport(topo, plan);
}

Plan plan_halo_q(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options) {
  PlannerWorkspace ws;
  Plan plan;
  plan_halo_q(topo, counts, options, ws, plan);
  return plan;
}

}  // namespace iser
