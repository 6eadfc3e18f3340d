// Fused HALO-Q planner + route rewrite (issue 6): plan() and rewrite() in one cooperative launch,
// without the second kernel boundary, and with the rewrite's plan-independent work done while the
// plan is being made.
//
// Work items, taken by CTA c in the order c, c + gridDim.x, ...: items [0, num_plans) are plans
// (plan_cta, the plan kernel's body, unchanged), the others one rewrite tile (kRouteTile routes of
// one row) each. A rewrite tile first loads its ids and computes every route's ordinal among the
// row's routes of its expert (DESIGN §4.5): the tiles before it (count()'s tile counts), the warps
// before it in the tile and the lanes before it in the warp. None of that reads the plan. Then
// one thread waits until the plan is published, and the tile maps ordinals to slots with the
// rewrite kernel's route_slot.
//
// Publication: the plan's CTA, after a block barrier that follows its last plan write, fences and
// stores (release, gpu scope) the launch's generation in the plan's ready word; a waiting thread
// loads it with acquire semantics, then a block barrier orders its CTA's plan reads after that
// load (the pattern of a cooperative grid barrier). The plan words are read with ld.global.cg (L2:
// no L1 line of an earlier launch can be read).
//
// Generations: every CTA reads the epoch word at its start and uses epoch + 1; the last CTA to
// finish (an arrival counter) resets the counter and stores the new epoch. Every CTA reads the
// epoch before it arrives, so no CTA of a launch sees the epoch of the next one, and replays of a
// CUDA graph need no reset. A ready word left at an older generation (a launch whose waiters gave
// up) never equals a later one, so a stale plan is never read.
//
// NOTE (progress): the launch is cooperative, so all CTAs are co-resident. A CTA takes its plan
// items before its rewrite items (plans have the lowest item indices), and a plan item never
// waits: every plan is published in finite time, so every wait ends. Each CTA holds a whole SM
// (PlanConfig::kThreads threads at up to 128 registers), so no waiting CTA shares the planner's
// SM. A wait longer than wait_ns (a bug, or a preempted grid) sets kGpuPlanTimeout and leaves the
// tile's routes at their home slots instead of hanging.
#pragma once

#include "cuda/plan.cuh"
#include "cuda/rewrite_slot.cuh"

namespace iser::cuda {

struct PlanRewriteConfig {
  static constexpr int kThreads = PlanConfig::kThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kWarpRoutes = kRouteTile / kWarps;  // contiguous routes per warp
  static constexpr int kRoutesPerLane = kWarpRoutes / 32;
  static constexpr unsigned kFullMask = 0xffffffffu;
  static_assert(kRouteTile % kThreads == 0);
};

namespace plan_rewrite_detail {

// Shared-memory words of a rewrite tile: warp counts [kWarps][E] (then their exclusive prefixes),
// the row's counts [E], expert_broadcast [E], the broadcast values [8][max_broadcasts] and the
// staged demand_end rows [max_broadcasts][P] (rewrite_detail::stages_demand only).
__host__ __device__ inline int tile_smem_words(int num_experts, int max_broadcasts, int num_ranks) {
  return (PlanRewriteConfig::kWarps + 2) * num_experts + 8 * max_broadcasts +
         (rewrite_detail::stages_demand(num_ranks, max_broadcasts) ? num_ranks * max_broadcasts
                                                                   : 0);
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* at) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(at) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* at) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(at) : "memory");
  return v;
}

__device__ __forceinline__ void store_release(uint32_t* at, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(at), "r"(v) : "memory");
}

// true once *ready == generation; false after wait_ns without it.
inline __device__ __noinline__ bool wait_for_plan(const uint32_t* ready, uint32_t generation,
                                                  long long wait_ns) {
  const unsigned long long start = plan_detail::global_timer();
#pragma unroll 1
  while (load_acquire(ready) != generation) {
    if (static_cast<long long>(plan_detail::global_timer() - start) > wait_ns) return false;
    __nanosleep(32);
  }
  return true;
}

// One rewrite tile: routes [tile * kRouteTile, +kRouteTile) of row `row`.
__device__ __forceinline__ void rewrite_tile(const PlanRewriteParams& p, int row, int tile,
                                             uint32_t generation) {
  using Config = PlanRewriteConfig;
  extern __shared__ int32_t smem[];
  __shared__ int published;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int P = p.plan.num_ranks;
  const int E = p.plan.num_experts;
  const int H = E / P;
  const int S = p.plan.num_slots;
  const int max_b = p.plan.max_broadcasts;
  const int global_row = p.first_rank + row;
  const int s = global_row % P;
  const int plan_idx = global_row / P;
  const int32_t* plan = p.plan.plans + static_cast<int64_t>(plan_idx) * p.plan.plan_words;
  const GpuPlanLayout lay{P, E, S, max_b};

  int32_t* warp_counts = smem;                     // [kWarps][E]
  int32_t* count_row = smem + Config::kWarps * E;  // c[s][e]
  int32_t* expert_broadcast = count_row + E;
  int32_t* b_expert = expert_broadcast + E;  // the broadcast values, [max_b] each
  int32_t* b_owner = b_expert + max_b;
  int32_t* b_begin = b_owner + max_b;
  int32_t* b_size = b_begin + max_b;
  int32_t* b_helper = b_size + max_b;
  int32_t* b_quota = b_helper + max_b;                // q[b][s]
  int32_t* b_supply_begin = b_quota + max_b;          // supply_begin[b][s]
  int32_t* b_demand_before = b_supply_begin + max_b;  // demand_end[b][s - 1] (0 for s = 0)
  int32_t* staged_demand = b_demand_before + max_b;

  // ---- plan-independent: ids, the row's counts, ordinals ----------------------------------
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  const int base = tile * kRouteTile + warp * Config::kWarpRoutes;
  int id[Config::kRoutesPerLane];
#pragma unroll
  for (int i = 0; i < Config::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    id[i] = idx < p.num_routes ? __ldg(ids + idx) : -1;
  }
  const int32_t* counts = p.plan.counts + (static_cast<int64_t>(plan_idx) * P + s) * E;
#pragma unroll 1
  for (int e = tid; e < E; e += Config::kThreads) count_row[e] = __ldg(counts + e);
#pragma unroll 1
  for (int i = tid; i < Config::kWarps * E; i += Config::kThreads) warp_counts[i] = 0;
  __syncthreads();

  // Pass 1: ordinal of each route among the warp's routes of its expert (routes in order).
  const unsigned lanes_below = (1u << lane) - 1u;
  int32_t* my_counts = warp_counts + warp * E;
  int ordinal[Config::kRoutesPerLane];
  bool bad = false;
#pragma unroll
  for (int i = 0; i < Config::kRoutesPerLane; ++i) {
    int v = id[i];
    if (v < -1 || v >= E) {
      bad = true;
      v = -1;
    }
    id[i] = v;
    const unsigned peers = __match_any_sync(Config::kFullMask, v);
    const int before = v >= 0 ? my_counts[v] : 0;
    __syncwarp();
    if (v >= 0 && lane == __ffs(peers) - 1) my_counts[v] = before + __popc(peers);
    ordinal[i] = before + __popc(peers & lanes_below);
    __syncwarp();
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGpuBadExpertId);

  // Pass 2: per expert, the routes of earlier tiles and warps, as an exclusive prefix in place.
  // Experts without a route in the tile are skipped, except in the last tile, which checks every
  // expert's total against the counts (the rewrite kernel checks the broadcast experts only).
  const bool last_tile = tile == p.num_tiles - 1;
  const int32_t* tiles = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E;
  bool stale = false;
#pragma unroll 1
  for (int e = tid; e < E; e += Config::kThreads) {
    int n[Config::kWarps];
    int in_tile = 0;
#pragma unroll
    for (int w = 0; w < Config::kWarps; ++w) {
      n[w] = warp_counts[w * E + e];
      in_tile += n[w];
    }
    if (in_tile == 0 && !last_tile) continue;
    int run = 0;
#pragma unroll 4
    for (int t = 0; t < tile; ++t) run += __ldg(tiles + static_cast<int64_t>(t) * E + e);
#pragma unroll
    for (int w = 0; w < Config::kWarps; ++w) {
      warp_counts[w * E + e] = run;
      run += n[w];
    }
    stale |= last_tile && run != count_row[e];
  }
  if (__syncthreads_or(stale) && tid == 0) atomicOr(p.error_word, kGpuStaleTiles);
#pragma unroll
  for (int i = 0; i < Config::kRoutesPerLane; ++i) {
    if (id[i] >= 0) ordinal[i] += my_counts[id[i]];
  }

  // ---- the plan: wait for it, stage its tables of source rank s -----------------------------
  if (tid == 0) {
    published = wait_for_plan(p.sync + kSyncReady + plan_idx, generation, p.wait_ns) ? 1 : 0;
  }
  __syncthreads();
  int B = 0;
  bool owner_home = false;
  const bool staged = rewrite_detail::stages_demand(P, max_b);
  if (published != 0) {
    // NOTE: one load round: the tables are staged for every b < max_b without waiting for B
    // (rows past B are never looked up: expert_broadcast maps only to b < B).
    const int plan_status = __ldcg(plan + GpuPlanLayout::kStatus);
    B = plan_status == 0 ? __ldcg(plan + GpuPlanLayout::kNumBroadcasts) : 0;
    owner_home = (__ldcg(plan + GpuPlanLayout::kFlags) & 1) != 0;
    if (plan_status != 0 && tile == 0 && tid == 0) atomicOr(p.error_word, kGpuPlanNotOk);
#pragma unroll 1
    for (int e = tid; e < E; e += Config::kThreads) {
      expert_broadcast[e] = __ldcg(plan + lay.expert_broadcast() + e);
    }
    if (staged) {
#pragma unroll 1
      for (int i = tid; i < max_b * P; i += Config::kThreads) {
        staged_demand[i] = __ldcg(plan + lay.demand_end() + i);
      }
    }
#pragma unroll 1
    for (int b = tid; b < max_b; b += Config::kThreads) {
      const int32_t* rec = plan + lay.broadcasts() + b * GpuPlanLayout::kBroadcastWords;
      b_expert[b] = __ldcg(rec + GpuPlanLayout::kExpert);
      b_owner[b] = __ldcg(rec + GpuPlanLayout::kOwner);
      b_begin[b] = __ldcg(rec + GpuPlanLayout::kGroupBegin);
      b_size[b] = __ldcg(rec + GpuPlanLayout::kGroupSize);
      b_helper[b] = __ldcg(rec + GpuPlanLayout::kHelper);
      b_quota[b] = __ldcg(plan + lay.quotas() + b * P + s);
      b_supply_begin[b] = __ldcg(plan + lay.supply_begin() + b * P + s);
      b_demand_before[b] = s > 0 ? __ldcg(plan + lay.demand_end() + b * P + s - 1) : 0;
    }
  } else if (tid == 0) {
    atomicOr(p.error_word, kGpuPlanTimeout);
  }
  __syncthreads();

  // ---- slots ----------------------------------------------------------------------------------
  int32_t* out = p.slot_ids + static_cast<int64_t>(row) * p.num_routes;
#pragma unroll
  for (int i = 0; i < Config::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    if (idx >= p.num_routes) continue;
    const int v = id[i];
    int slot = -1;
    if (v >= 0) {
      const int b = B > 0 ? expert_broadcast[v] : -1;
      if (b < 0) {
        const int owner = v / H;
        slot = owner * (H + S) + (v - owner * H);
      } else {
        // diag and low as the rewrite kernel's views, from this route's own c[s][e].
        const int c = count_row[v];
        const int diag = min(c, b_quota[b]);
        const int supply_begin = b_supply_begin[b];
        const int low = min(max(b_demand_before[b] - supply_begin, 0), c - diag);
        const int32_t* staged_row = staged_demand + b * P;
        const int32_t* global_row_b = plan + lay.demand_end() + b * P;
        slot = rewrite_detail::route_slot(
            low, diag, supply_begin,
            [&](int d) { return staged ? staged_row[d] : __ldcg(global_row_b + d); }, v, b_owner[b],
            b_begin[b], b_size[b], b_helper[b], s, ordinal[i], P, H, S, owner_home);
      }
    }
    out[idx] = slot;
  }
}

}  // namespace plan_rewrite_detail

__global__ void __launch_bounds__(PlanRewriteConfig::kThreads, 1)
    plan_rewrite_kernel(const PlanRewriteParams p, const PlanSmem lay) {
  using namespace plan_rewrite_detail;
  __shared__ uint32_t epoch;
  const int tid = threadIdx.x;
  if (tid == 0) epoch = load_relaxed(p.sync + kSyncEpoch);
  __syncthreads();
  const uint32_t generation = epoch + 1u;
  const int num_plans = p.plan.num_plans;
  const int num_items = num_plans + p.num_rows * p.num_tiles;
#pragma unroll 1
  for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
    if (item < num_plans) {
      plan_cta<false>(p.plan, lay, item);
      __syncthreads();  // every plan word written
      if (tid == 0) {
        __threadfence();
        store_release(p.sync + kSyncReady + item, generation);
      }
    } else {
      const int work = item - num_plans;
      rewrite_tile(p, work / p.num_tiles, work % p.num_tiles, generation);
    }
    __syncthreads();  // the next item reuses the shared memory
  }
  if (tid == 0) {
    __threadfence();  // NOTE: orders this CTA's epoch read (and its publications) before arriving
    if (atomicAdd(p.sync + kSyncArrivals, 1u) == gridDim.x - 1) {
      p.sync[kSyncArrivals] = 0;        // every CTA has arrived: nobody reads either word until the
      p.sync[kSyncEpoch] = generation;  // next launch, which the kernel boundary orders after
    }
  }
}

}  // namespace iser::cuda
