#include "iser/plan.h"

namespace iser {

std::string_view to_string(TransportMode mode) {
  switch (mode) {
    case TransportMode::kOwnerDirect:
      return "owner-direct";
    case TransportMode::kSami:
      return "sami";
    case TransportMode::kPointToPoint:
      return "p2p";
    case TransportMode::kSamiOwner:
      return "sami-owner";
  }
  return "unknown";
}

Plan make_empty_plan(const Topology& topo, const CountMatrix& counts) {
  Plan plan;
  plan.num_ranks = topo.num_ranks;
  plan.num_experts = topo.num_experts;
  plan.num_slots = topo.num_slots;
  const auto loads = counts.home_loads(topo);
  int64_t total = 0;
  for (const int64_t l : loads) total += l;
  plan.target = static_cast<int32_t>((total + topo.num_ranks - 1) / topo.num_ranks);
  plan.loads.assign(loads.begin(), loads.end());
  return plan;
}

}  // namespace iser
