// Route-rewrite kernel (docs/design.md §4.5): a rank's topk_ids -> global slot ids, on many CTAs.
//
// A route of expert e is the ordinal-th route of e in the rank's flattened [token, k] order.
// Ordinals come from three prefix sums: the tiles before this CTA's (tile counts recorded by the
// count kernel), the warps before this one in the tile, and the lanes before this one in the
// warp (__match_any_sync). With the plan's north-west-corner tables, ordinal o of source s goes
// to the residual destinations d < s first, then s itself (diag = min(c[s][e], q[s]), q summed
// over the expert's broadcasts), then to d > s: dest = the first d whose demand_end exceeds
// supply_begin[s] + (o minus the diag routes already passed), a binary search over P.
#pragma once

#include <cstdint>

#include "cuda/planner_kernels.h"
#include "cuda/rewrite_slot.cuh"
#include "iser/gpu_planner.h"

namespace iser::cuda {

struct RewriteConfig {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kWarpRoutes = kRouteTile / kWarps;  // contiguous routes per warp
  static constexpr int kRoutesPerLane = kWarpRoutes / 32;
  static constexpr unsigned kFullMask = 0xffffffffu;
  static_assert(kRouteTile % kThreads == 0);
  static_assert(kRoutesPerLane == kRewriteMaxParts);
};

namespace rewrite_detail {

// Per-broadcast values of this CTA's source rank s, staged in shared memory once per CTA so the
// per-route work reads no plan words from global memory (nor the binary search, when the
// demand_end rows are staged too).
struct BroadcastView {
  int32_t* expert;
  int32_t* owner;
  int32_t* begin;
  int32_t* size;
  int32_t* helper;
  int32_t* previous;      // the expert's broadcast before this one, -1 = none
  int32_t* diag;          // routes s computes itself (SourceRoutes)
  int32_t* low;           // residual routes of s that go to ranks d < s
  int32_t* supply_begin;  // residual supply of the ranks before s
  static constexpr int kArrays = 9;
};

// Shared-memory layout (int32 words): warp counts [kWarps][max_broadcasts], expert_broadcast
// [num_experts], the BroadcastView arrays [max_broadcasts] each, then the staged demand_end rows
// [max_broadcasts][P] (stages_demand only).
__host__ __device__ inline int rewrite_smem_words(int num_experts, int max_broadcasts,
                                                  int num_ranks) {
  return RewriteConfig::kWarps * max_broadcasts + num_experts +
         BroadcastView::kArrays * max_broadcasts +
         (stages_demand(num_ranks, max_broadcasts) ? num_ranks * max_broadcasts : 0);
}

// route_slot of broadcast b from the staged views.
__device__ __forceinline__ int broadcast_slot(const BroadcastView& v, const int32_t* demand_end,
                                              int b, int s, int ordinal, int P, int H, int S,
                                              bool owner_home) {
  return route_slot(
      SourceRoutes{v.diag[b], v.low[b], v.supply_begin[b]},
      [demand_end](int d) { return demand_end[d]; },
      [&v](int g) { return make_int4(v.begin[g], v.size[g], v.helper[g], v.previous[g]); }, b,
      v.expert[b], v.owner[b], s, ordinal, P, H, S, owner_home);
}

// Stages the plan in shared memory: the expert -> broadcast map, one view per broadcast (its
// record and this row's source routes) and, where they fit, the demand_end rows. Returns where
// demand_end is read from. All threads; the caller's block barrier publishes the stores.
__device__ __forceinline__ const int32_t* stage_plan(
    const RewriteParams& p, const int32_t* plan, const int32_t* counts, const GpuPlanLayout& lay,
    const BroadcastView& view, int32_t* expert_broadcast, int32_t* staged_demand, int B, int s,
    int tid) {
  const int P = p.num_ranks;
  const int E = p.num_experts;
  const int max_b = p.max_broadcasts;
  if (B > 0) {
    for (int e = tid; e < E; e += RewriteConfig::kThreads) {
      expert_broadcast[e] = plan[lay.expert_broadcast() + e];
    }
  }
  // demand_end rows: staged beside the views (same load depth), or read from the plan.
  const bool staged = stages_demand(P, max_b);
  if (staged) {
    for (int i = tid; i < B * P; i += RewriteConfig::kThreads) {
      staged_demand[i] = plan[lay.demand_end() + i];
    }
  }
  for (int b = tid; b < B; b += RewriteConfig::kThreads) {
    const int32_t* rec = plan + lay.broadcasts() + b * GpuPlanLayout::kBroadcastWords;
    const int expert = rec[GpuPlanLayout::kExpert];
    const int32_t* supply_row = plan + lay.supply_begin() + b * P;
    const int32_t* demand_row = plan + lay.demand_end() + b * P;
    const SourceRoutes src = source_routes(counts[s * E + expert], supply_row[s],
                                           s + 1 < P ? supply_row[s + 1] : demand_row[P - 1],
                                           s > 0 ? demand_row[s - 1] : 0);
    view.expert[b] = expert;
    view.owner[b] = rec[GpuPlanLayout::kOwner];
    view.begin[b] = rec[GpuPlanLayout::kGroupBegin];
    view.size[b] = rec[GpuPlanLayout::kGroupSize];
    view.helper[b] = rec[GpuPlanLayout::kHelper];
    view.previous[b] = rec[GpuPlanLayout::kPrevious];
    view.diag[b] = src.diag;
    view.low[b] = src.low;
    view.supply_begin[b] = src.supply_begin;
  }
  return staged ? staged_demand : plan + lay.demand_end();
}

}  // namespace rewrite_detail

__global__ void __launch_bounds__(RewriteConfig::kThreads) rewrite_kernel(const RewriteParams p) {
  using namespace rewrite_detail;
  extern __shared__ int32_t smem[];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int row = blockIdx.y;
  const int tile = static_cast<int>(blockIdx.x) / p.num_parts;
  const int part = static_cast<int>(blockIdx.x) % p.num_parts;
  const int P = p.num_ranks;
  const int E = p.num_experts;
  const int H = E / P;
  const int S = p.num_slots;
  const int max_b = p.max_broadcasts;
  const int global_row = p.first_rank + row;
  const int s = global_row % P;
  const int plan_idx = global_row / P;
  const int32_t* plan = p.plans + static_cast<int64_t>(plan_idx) * p.plan_words;
  const int32_t* counts = p.counts + static_cast<int64_t>(plan_idx) * P * E;
  const GpuPlanLayout lay{P, E, S, max_b};

  // The route ids do not depend on the plan: load them first, beside the plan header.
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  const int base = tile * kRouteTile + warp * RewriteConfig::kWarpRoutes;
  int id[RewriteConfig::kRoutesPerLane];
#pragma unroll
  for (int i = 0; i < RewriteConfig::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    id[i] = idx < p.num_routes ? __ldg(ids + idx) : -1;
  }
  const int plan_status = plan[GpuPlanLayout::kStatus];
  const int B = plan_status == 0 ? plan[GpuPlanLayout::kNumBroadcasts] : 0;
  const bool owner_home = (plan[GpuPlanLayout::kFlags] & 1) != 0;
  if (plan_status != 0 && tile == 0 && tid == 0) atomicOr(p.error_word, kGpuPlanNotOk);

  int32_t* warp_counts = smem;  // [kWarps][max_b]
  int32_t* expert_broadcast = smem + RewriteConfig::kWarps * max_b;
  int32_t* arrays = expert_broadcast + E;
  const BroadcastView view{arrays,
                           arrays + max_b,
                           arrays + 2 * max_b,
                           arrays + 3 * max_b,
                           arrays + 4 * max_b,
                           arrays + 5 * max_b,
                           arrays + 6 * max_b,
                           arrays + 7 * max_b,
                           arrays + 8 * max_b};
  const int32_t* demand_end = stage_plan(p, plan, counts, lay, view, expert_broadcast,
                                         arrays + BroadcastView::kArrays * max_b, B, s, tid);
  int32_t* my_counts = warp_counts + warp * max_b;
  for (int b = lane; b < B; b += 32) my_counts[b] = 0;
  __syncthreads();

  // Pass 1: broadcast of each route, ordinal within the warp's contiguous routes.
  const unsigned lanes_below = (1u << lane) - 1u;
  int bidx[RewriteConfig::kRoutesPerLane];
  int ordinal[RewriteConfig::kRoutesPerLane];
  bool bad = false;
#pragma unroll
  for (int i = 0; i < RewriteConfig::kRoutesPerLane; ++i) {
    int v = id[i];
    if (v < -1 || v >= E) {
      bad = true;
      v = -1;
    }
    id[i] = v;
    const int b = (v >= 0 && B > 0) ? expert_broadcast[v] : -1;
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
    const int expert = view.expert[b];
    // Routes of an expert broadcast more than once count at its last broadcast (expert_broadcast).
    if (expert_broadcast[expert] != b) continue;
    const int32_t* tiles = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E + expert;
    int run = 0;
    for (int t = lane; t < tile; t += 32) run += tiles[static_cast<int64_t>(t) * E];
    run = __reduce_add_sync(RewriteConfig::kFullMask, run);
    if (lane == 0) {
      for (int w = 0; w < RewriteConfig::kWarps; ++w) {
        const int n = warp_counts[w * max_b + b];
        warp_counts[w * max_b + b] = run;
        run += n;
      }
      // The last tile sees every route of the row: they must add up to the counts.
      if (tile == p.num_tiles - 1 && run != counts[s * E + expert]) {
        atomicOr(p.error_word, kGpuStaleTiles);
      }
    }
  }
  __syncthreads();

  // Pass 3: slots, of this CTA's part of the lane's routes.
  int32_t* out = p.slot_ids + static_cast<int64_t>(row) * p.num_routes;
#pragma unroll
  for (int i = 0; i < RewriteConfig::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    if (idx >= p.num_routes || i % p.num_parts != part) continue;
    const int v = id[i];
    int slot = -1;
    if (v >= 0) {
      const int b = bidx[i];
      if (b < 0) {
        const int owner = v / H;
        slot = owner * (H + S) + (v - owner * H);
      } else {
        slot = broadcast_slot(view, demand_end + b * P, b, s, my_counts[b] + ordinal[i], P, H, S,
                              owner_home);
      }
    }
    out[idx] = slot;
  }
}

}  // namespace iser::cuda
