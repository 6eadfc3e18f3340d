// Per-slot loads of a plan (include/iser/moe.h): what each rank's grouped GEMM computes.
#include "iser/error.h"
#include "iser/moe.h"

namespace iser::moe {

std::vector<int32_t> slot_loads(const Topology& topo, const CountMatrix& counts, const Plan& plan) {
  const int num_ranks = topo.num_ranks;
  const int home = topo.experts_per_rank();
  const int per_rank = topo.slots_per_rank();
  ISER_CHECK(counts.num_ranks() == num_ranks && counts.num_experts() == topo.num_experts,
             "slot loads: counts are {}x{}, topology {}x{}", counts.num_ranks(),
             counts.num_experts(), num_ranks, topo.num_experts);
  std::vector<int32_t> loads(static_cast<size_t>(num_ranks) * per_rank, 0);
  const std::vector<int64_t> hist = counts.histogram();
  for (int e = 0; e < topo.num_experts; ++e) {
    loads[topo.home_slot(e)] = static_cast<int32_t>(hist[e]);
  }
  for (const Broadcast& b : plan.broadcasts) {
    ISER_CHECK(b.expert >= 0 && b.expert < topo.num_experts && b.helper >= 0 &&
                   b.helper < topo.num_slots && static_cast<int>(b.quota.size()) == num_ranks,
               "slot loads: malformed broadcast (expert {}, helper {}, {} quotas)", b.expert,
               b.helper, b.quota.size());
    for (int r = 0; r < num_ranks; ++r) {
      const int32_t quota = b.quota[r];
      if (quota == 0) continue;
      const bool at_home = r == b.owner && (!b.in_group(r) || plan.owner_uses_home_slot);
      if (at_home) continue;
      ISER_CHECK(b.in_group(r), "slot loads: rank {} has quota {} of expert {} outside its group",
                 r, quota, b.expert);
      loads[static_cast<size_t>(r) * per_rank + home + b.helper] += quota;
      loads[topo.home_slot(b.expert)] -= quota;
    }
  }
  for (int r = 0; r < num_ranks; ++r) {
    int64_t sum = 0;
    for (int s = 0; s < per_rank; ++s) {
      const int32_t load = loads[static_cast<size_t>(r) * per_rank + s];
      ISER_CHECK(load >= 0, "slot loads: rank {} slot {} gets {} routes", r, s, load);
      sum += load;
    }
    if (!plan.loads.empty()) {
      ISER_CHECK(sum == plan.loads[r], "slot loads: rank {} computes {} routes, plan says {}", r,
                 sum, plan.loads[r]);
    }
  }
  return loads;
}

}  // namespace iser::moe
