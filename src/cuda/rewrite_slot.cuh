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

// Source rank s's values of a broadcast's north-west corner, from its rows of the rewrite tables:
// the residual supply of s is supply_end - supply_begin (supply_end: supply_begin[s + 1], or for
// the last rank the total, demand_end[P - 1]), so diag = min(c[s][e], quota of s) = c - that,
// without the quota (which, for an expert broadcast more than once, sums over its broadcasts).
struct SourceRoutes {
  int diag;          // routes s computes itself
  int low;           // residual routes of s that go to ranks d < s
  int supply_begin;  // residual supply of the ranks before s
};

__device__ __forceinline__ SourceRoutes source_routes(int c, int supply_begin, int supply_end,
                                                      int demand_before) {
  const int supply = supply_end - supply_begin;
  return {c - supply, min(max(demand_before - supply_begin, 0), supply), supply_begin};
}

// Slot of the ordinal-th route of expert `expert` at source rank s (docs/design.md §4.5): the
// residual destinations d < s first (`low` routes), then s itself (`diag` routes), then d > s:
// dest = the first d with demand_end(d) > supply_begin + (ordinal minus the diag routes already
// passed), a binary search over P. Then, as rewrite_tokens: the owner's home slot when dest is
// the owner using its home slot; else the helper slot of the broadcast of the expert whose group
// holds dest (from broadcast b along `previous`: group(b) = {begin, size, helper, previous}); else
// (the owner outside every group) the home slot. The two kernels differ only in where the values
// come from; `demand_end(d)` reads the expert's demand_end row.
template <typename DemandEnd, typename Group>
__device__ __forceinline__ int route_slot(const SourceRoutes& src, DemandEnd&& demand_end,
                                          Group&& group, int b, int expert, int owner, int s,
                                          int ordinal, int P, int H, int S, bool owner_home) {
  int dest = s;
  if (ordinal < src.low || ordinal >= src.low + src.diag) {
    const int target = src.supply_begin + (ordinal < src.low ? ordinal : ordinal - src.diag);
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
  if (!(owner_home && dest == owner)) {
#pragma unroll 1
    while (b >= 0) {  // HALO-Q plans: one broadcast per expert, one step
      const int4 g = group(b);
      if (dest >= g.x && dest < g.x + g.y) return dest * (H + S) + H + g.z;
      b = g.w;
    }
  }
  return owner * (H + S) + (expert - owner * H);  // the owner's home slot
}

}  // namespace iser::cuda::rewrite_detail
