// HALO-Q stage 3: slot coloring (docs/design.md §4.3).
//
// NOTE: aligned groups are nested or disjoint. Colouring coarse to fine, every group coloured
// before G that meets G contains G (or equals it), so all members of G see the same used
// indices: at most S − 1 of them when every rank is in at most S groups. Any free index keeps
// that argument, which is why a resident broadcast may claim its previous index instead of the
// smallest one, as long as it does so among broadcasts of its own level.
//
// Interpretation: an owner outside its group is not coloured (it serves from its home slot).
// Interpretation (resident variant, docs/design.md §5): within a level, matching broadcasts (same
// expert, level and group as one of `previous`) first claim their previous helper index in plan
// order when it is free on the whole group; then the remaining broadcasts of the level take the
// smallest free index.
#include <bit>

#include "iser/error.h"
#include "iser/planner.h"

namespace iser {
namespace {

uint64_t group_mask(const PlannerWorkspace& ws, const Broadcast& b) {
  uint64_t used = 0;
  for (int m = b.group_begin; m < b.group_begin + b.group_size; ++m) used |= ws.helper_mask[m];
  return used;
}

void claim(PlannerWorkspace& ws, Broadcast& b, int helper) {
  b.helper = helper;
  for (int m = b.group_begin; m < b.group_begin + b.group_size; ++m) {
    ws.helper_mask[m] |= uint64_t{1} << helper;
  }
}

// Helper index of the matching broadcast of `previous`, or -1.
int previous_helper(const Plan* previous, const Broadcast& b) {
  if (previous == nullptr) return -1;
  for (const Broadcast& p : previous->broadcasts) {
    if (p.expert == b.expert && p.level == b.level && p.group_begin == b.group_begin &&
        p.group_size == b.group_size) {
      return p.helper;
    }
  }
  return -1;
}

}  // namespace

void color_slots(const Topology& topo, Plan& plan, PlannerWorkspace& ws, const Plan* previous) {
  const int S = topo.num_slots;
  ws.helper_mask.assign(topo.num_ranks, 0);
  const uint64_t all_slots = S >= 64 ? ~uint64_t{0} : (uint64_t{1} << S) - 1;
  for (Broadcast& b : plan.broadcasts) b.resident = false;
  for (int level = 0; level < topo.num_levels(); ++level) {
    if (previous != nullptr) {
      for (Broadcast& b : plan.broadcasts) {
        if (b.level != level) continue;
        const int h = previous_helper(previous, b);
        if (h < 0 || h >= S || (group_mask(ws, b) >> h & 1) != 0) continue;
        claim(ws, b, h);
        b.resident = true;
      }
    }
    for (size_t b_idx = 0; b_idx < plan.broadcasts.size(); ++b_idx) {
      Broadcast& b = plan.broadcasts[b_idx];
      if (b.level != level || b.resident) continue;
      const uint64_t free = ~group_mask(ws, b) & all_slots;
      ISER_CHECK(free != 0,
                 "internal error: slot coloring found no helper index free on group [{}, {}) "
                 "for broadcast {} (expert {})",
                 b.group_begin, b.group_begin + b.group_size, b_idx, b.expert);
      claim(ws, b, std::countr_zero(free));
    }
  }
}

}  // namespace iser
