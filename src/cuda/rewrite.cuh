// Route-rewrite kernel (DESIGN §4.5): a rank's topk_ids -> global slot ids, on many CTAs.
//
// A route of expert e is the ordinal-th route of e in the rank's flattened [token, k] order.
// Ordinals come from three prefix sums: the tiles before this CTA's (tile counts recorded by the
// count kernel), the warps before this one in the tile, and the lanes before this one in the
// warp (__match_any_sync). With the plan's north-west-corner tables, ordinal o of source s goes
// to the residual destinations d < s first, then s itself (diag = min(c[s][e], q[s])), then to
// d > s: dest = the first d whose demand_end exceeds supply_begin[s] + (o minus the diag routes
// already passed), a binary search over P.
#pragma once

#include <cstdint>

#include "cuda/planner_kernels.h"
#include "iser/gpu_planner.h"

namespace iser::cuda {

struct RewriteConfig {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kWarpRoutes = kRouteTile / kWarps;  // contiguous routes per warp
  static constexpr int kRoutesPerLane = kWarpRoutes / 32;
  static constexpr unsigned kFullMask = 0xffffffffu;
  static_assert(kRouteTile % kThreads == 0);
};

namespace rewrite_detail {

// Slot of the ordinal-th route of broadcast b's expert at source rank s.
__device__ __forceinline__ int broadcast_slot(const int32_t* plan, const GpuPlanLayout& lay,
                                              const int32_t* counts, int b, int expert, int s,
                                              int ordinal, int H, int S, bool owner_home) {
  const int P = lay.num_ranks;
  const int32_t* rec = plan + lay.broadcasts() + b * GpuPlanLayout::kBroadcastWords;
  const int owner = rec[GpuPlanLayout::kOwner];
  const int begin = rec[GpuPlanLayout::kGroupBegin];
  const int size = rec[GpuPlanLayout::kGroupSize];
  const int helper = rec[GpuPlanLayout::kHelper];
  const int c = counts[s * lay.num_experts + expert];
  const int q = plan[lay.quotas() + b * P + s];
  const int diag = min(c, q);
  const int supply = c - diag;
  const int supply_begin = plan[lay.supply_begin() + b * P + s];
  const int32_t* demand_end = plan + lay.demand_end() + b * P;
  const int before = s > 0 ? demand_end[s - 1] : 0;
  const int low = min(max(before - supply_begin, 0), supply);  // residual routes to d < s
  int dest = s;
  if (ordinal < low || ordinal >= low + diag) {
    const int target = supply_begin + (ordinal < low ? ordinal : ordinal - diag);
    int lo = 0;
    int hi = P - 1;
    while (lo < hi) {  // first d with demand_end[d] > target
      const int mid = (lo + hi) >> 1;
      if (demand_end[mid] > target) {
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

}  // namespace rewrite_detail

__global__ void __launch_bounds__(RewriteConfig::kThreads) rewrite_kernel(const RewriteParams p) {
  using namespace rewrite_detail;
  extern __shared__ int32_t warp_counts[];  // [kWarps][max_broadcasts]
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int row = blockIdx.y;
  const int tile = blockIdx.x;
  const int P = p.num_ranks;
  const int E = p.num_experts;
  const int H = E / P;
  const int S = p.num_slots;
  const int global_row = p.first_rank + row;
  const int s = global_row % P;
  const int plan_idx = global_row / P;
  const int32_t* plan = p.plans + static_cast<int64_t>(plan_idx) * p.plan_words;
  const int32_t* counts = p.counts + static_cast<int64_t>(plan_idx) * P * E;
  const GpuPlanLayout lay{P, E, S, p.max_broadcasts};
  const int plan_status = plan[GpuPlanLayout::kStatus];
  const int B = plan_status == 0 ? plan[GpuPlanLayout::kNumBroadcasts] : 0;
  const bool owner_home = (plan[GpuPlanLayout::kFlags] & 1) != 0;
  if (plan_status != 0 && tile == 0 && tid == 0) atomicOr(p.error_word, kGpuPlanNotOk);

  int32_t* my_counts = warp_counts + warp * p.max_broadcasts;
  for (int b = lane; b < B; b += 32) my_counts[b] = 0;
  __syncwarp();

  // Pass 1: ids, broadcast of each route, ordinal within the warp's contiguous routes.
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  const int base = tile * kRouteTile + warp * RewriteConfig::kWarpRoutes;
  const unsigned lanes_below = (1u << lane) - 1u;
  int id[RewriteConfig::kRoutesPerLane];
  int bidx[RewriteConfig::kRoutesPerLane];
  int ordinal[RewriteConfig::kRoutesPerLane];
  bool bad = false;
#pragma unroll
  for (int i = 0; i < RewriteConfig::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    int v = idx < p.num_routes ? ids[idx] : -1;
    if (v < -1 || v >= E) {
      bad = true;
      v = -1;
    }
    id[i] = v;
    const int b = (v >= 0 && B > 0) ? plan[lay.expert_broadcast() + v] : -1;
    bidx[i] = b;
    const unsigned peers = __match_any_sync(RewriteConfig::kFullMask, b);
    const int before = b >= 0 ? my_counts[b] : 0;
    __syncwarp();
    if (b >= 0 && lane == __ffs(peers) - 1) my_counts[b] = before + __popc(peers);
    ordinal[i] = before + __popc(peers & lanes_below);
    __syncwarp();
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGpuBadExpertId);

  // Pass 2: per broadcast (one warp each), routes of earlier tiles and warps, as an exclusive
  // prefix in place. The lanes load the earlier tiles' counts in parallel: a serial loop would
  // chain up to num_tiles dependent global loads.
  for (int b = warp; b < B; b += RewriteConfig::kWarps) {
    const int expert = plan[lay.broadcasts() + b * GpuPlanLayout::kBroadcastWords];
    const int32_t* tiles = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E + expert;
    int run = 0;
    for (int t = lane; t < tile; t += 32) run += tiles[static_cast<int64_t>(t) * E];
    run = __reduce_add_sync(RewriteConfig::kFullMask, run);
    if (lane == 0) {
      for (int w = 0; w < RewriteConfig::kWarps; ++w) {
        const int n = warp_counts[w * p.max_broadcasts + b];
        warp_counts[w * p.max_broadcasts + b] = run;
        run += n;
      }
      // The last tile sees every route of the row: they must add up to the counts.
      if (tile == p.num_tiles - 1 && run != counts[s * E + expert]) {
        atomicOr(p.error_word, kGpuStaleTiles);
      }
    }
  }
  __syncthreads();

  // Pass 3: slots.
  int32_t* out = p.slot_ids + static_cast<int64_t>(row) * p.num_routes;
#pragma unroll
  for (int i = 0; i < RewriteConfig::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    if (idx >= p.num_routes) continue;
    const int v = id[i];
    int slot = -1;
    if (v >= 0) {
      const int b = bidx[i];
      if (b < 0) {
        const int owner = v / H;
        slot = owner * (H + S) + (v - owner * H);
      } else {
        slot =
            broadcast_slot(plan, lay, counts, b, v, s, my_counts[b] + ordinal[i], H, S, owner_home);
      }
    }
    out[idx] = slot;
  }
}

}  // namespace iser::cuda
