// Device helpers of the route rewrite (docs/design.md §4.5) shared by the rewrite kernel
// (rewrite.cuh) and the fused planner + rewrite kernel (plan_rewrite.cuh).
#pragma once

#include <cstdint>

namespace iser::cuda::rewrite_detail {

// The demand_end rows of the broadcasts [max_broadcasts][P] are staged in shared memory when they
// take at most this many words (every plan of the benchmarked topologies): the per-route binary
// search then chains shared loads instead of log2(P) dependent global ones.
inline constexpr int kStagedDemandWords = 16384;

__host__ __device__ inline bool stages_demand(int num_ranks, int max_broadcasts) {
  return static_cast<long long>(num_ranks) * max_broadcasts <= kStagedDemandWords;
}

// Slot of the ordinal-th route of a broadcast at source rank s (docs/design.md §4.5): the residual
// destinations d < s first (`low` routes), then s itself (`diag` routes), then d > s: dest = the
// first d with demand_end(d) > supply_begin + (ordinal minus the diag routes already passed), a
// binary search over P. The home slot when dest is outside the group or is the owner using its
// home slot. The two kernels differ only in where the broadcast's values come from;
// `demand_end(d)` reads the broadcast's demand_end row.
template <typename DemandEnd>
__device__ __forceinline__ int route_slot(int low, int diag, int supply_begin,
                                          DemandEnd&& demand_end, int expert, int owner, int begin,
                                          int size, int helper, int s, int ordinal, int P, int H,
                                          int S, bool owner_home) {
  int dest = s;
  if (ordinal < low || ordinal >= low + diag) {
    const int target = supply_begin + (ordinal < low ? ordinal : ordinal - diag);
    int lo = 0;
    int hi = P - 1;
    while (lo < hi) {  // first d with demand_end[d] > target
      const int mid = (lo + hi) >> 1;
      if (demand_end(mid) > target) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    dest = lo;
  }
  const bool in_group = dest >= begin && dest < begin + size;
  if (in_group && !(owner_home && dest == owner)) return dest * (H + S) + H + helper;
  return owner * (H + S) + (expert - owner * H);  // the owner's home slot
}

}  // namespace iser::cuda::rewrite_detail
