// HALO-Q stage 6: transport mode per broadcast (docs/design.md §4.6).
//
// Owner-direct when the owner is a member of G_b and either G_b is pure (every broadcast whose
// group meets G_b has exactly G_b as group and its owner inside) or b is its owner's coarsest
// in-group broadcast (ties: earlier in plan order); SAMI otherwise.
// Interpretation: "meeting G_b" means sharing at least one member; b itself is included (trivially
// exact). Levels compare as numbers (smaller = coarser).
#include "iser/planner.h"

namespace iser {
namespace {

bool groups_meet(const Broadcast& x, const Broadcast& y) {
  return x.group_begin < y.group_begin + y.group_size &&
         y.group_begin < x.group_begin + x.group_size;
}

bool group_is_pure(const Plan& plan, const Broadcast& b) {
  for (const Broadcast& other : plan.broadcasts) {
    if (!groups_meet(b, other)) continue;
    if (other.group_begin != b.group_begin || other.group_size != b.group_size ||
        !other.owner_in_group()) {
      return false;
    }
  }
  return true;
}

bool is_coarsest_in_group(const Plan& plan, size_t b_idx) {
  const Broadcast& b = plan.broadcasts[b_idx];
  for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
    const Broadcast& other = plan.broadcasts[i];
    if (i == b_idx || other.owner != b.owner || !other.owner_in_group()) continue;
    if (other.level < b.level || (other.level == b.level && i < b_idx)) return false;
  }
  return true;
}

}  // namespace

void assign_transport(const Topology& topo, Plan& plan) {
  for (size_t b_idx = 0; b_idx < plan.broadcasts.size(); ++b_idx) {
    Broadcast& b = plan.broadcasts[b_idx];
    const bool direct =
        b.owner_in_group() && (group_is_pure(plan, b) || is_coarsest_in_group(plan, b_idx));
    b.mode = direct ? TransportMode::kOwnerDirect : TransportMode::kSami;
  }
}

}  // namespace iser
