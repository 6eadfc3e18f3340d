// Device helpers of the route rewrite (DESIGN §4.5) shared by the rewrite kernel (rewrite.cuh)
// and the fused planner + rewrite kernel (plan_rewrite.cuh).
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

// Slot of the ordinal-th route of a broadcast at source rank s (DESIGN §4.5): the residual
// destinations d < s first (`low` routes), then s itself (`diag` routes), then d > s: dest = the
// first d with demand_end(d) > supply_begin + (ordinal minus the diag routes already passed), a
// binary search over P (P - 1 when there is none). The home slot when dest is outside the group
// or is the owner using its home slot. The two kernels differ only in where the broadcast's
// values come from; `demand_end(d)` reads the broadcast's demand_end row (nondecreasing in d).
// NOTE: the search runs for every route (routes of s itself just ignore it) and takes
// ceil(log2 P) steps whatever the data, each a select, so the lanes of a warp never diverge in
// it (with a data-dependent `while (lo < hi)` and a branch per step, ncu showed the fused
// kernel's slot pass stalled on branch resolving; docs/benchmarks.md, issue 6).
template <typename DemandEnd>
__device__ __forceinline__ int route_slot(int low, int diag, int supply_begin,
                                          DemandEnd&& demand_end, int expert, int owner, int begin,
                                          int size, int helper, int s, int ordinal, int P, int H,
                                          int S, bool owner_home) {
  const bool residual = ordinal < low || ordinal >= low + diag;
  const int target = supply_begin + (ordinal < low ? ordinal : ordinal - diag);
  // The first d in [base, base + n) with demand_end(d) > target is the answer; halve n.
  int base = 0;
#pragma unroll 1
  for (int n = P; n > 1;) {
    const int half = n >> 1;
    base = demand_end(base + half - 1) > target ? base : base + half;
    n -= half;
  }
  const int dest = residual ? base : s;
  const bool in_group = dest >= begin && dest < begin + size;
  if (in_group && !(owner_home && dest == owner)) return dest * (H + S) + H + helper;
  return owner * (H + S) + (expert - owner * H);  // the owner's home slot
}

}  // namespace iser::cuda::rewrite_detail
