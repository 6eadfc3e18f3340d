// Fused planner (HALO-Q or iser) + route rewrite: plan() and rewrite() in one cooperative launch,
// without the second kernel boundary, and with the rewrite's plan-independent work done while the
// plan is being made.
//
// CTA i < num_plans makes plan i (plan_cta, the plan kernel's body, unchanged, outside any loop:
// with the plan inside an item loop beside the rewrite, ptxas made it 8% slower, 200 against 186
// us in-kernel at EP64); the other CTAs take the rewrite tiles (kRouteTile routes of one row),
// one or more each. A rewrite tile first loads its ids and computes every route's ordinal among the
// row's routes of its expert (docs/design.md §4.5): the tiles before it (count()'s tile counts),
// the warps before it in the tile and the lanes before it in the warp. None of that reads the plan.
// Then one thread waits until the plan is published, and the tile maps ordinals to slots with the
// rewrite kernel's route_slot.
//
// Publication: the plan's CTA, after a block barrier that follows its last plan write, stores
// (release, gpu scope) the launch's generation in the plan's ready word; a waiting thread
// loads it with acquire semantics, then a block barrier orders its CTA's plan reads after that
// load (the pattern of a cooperative grid barrier). The plan words are read with ld.global.cg (L2:
// no L1 line of an earlier launch can be read).
//
// Generations: every CTA reads the epoch word at its start and uses epoch + 1; every CTA but
// CTA 0 then counts itself in the start word (a release add). CTA 0, after publishing plan 0, waits
// until all of them are counted (acquire), resets the count and stores the new epoch: no CTA of a
// launch sees the epoch of the next one, and replays of a CUDA graph need no reset. A ready word
// left at an older generation (a launch whose waiters gave up) never equals a later one, so a
// stale plan is never read.
//
// NOTE (progress): the launch is cooperative, so all CTAs are co-resident, and a plan CTA never
// waits for another CTA's work (CTA 0 waits only for every CTA to have started): every plan is
// published in finite time, so every wait ends. Each CTA holds a whole SM (PlanConfig::kThreads
// threads at up to 128 registers), so no waiting CTA shares the planner's SM. A wait longer than
// wait_ns (a bug, or a preempted grid) sets kGpuPlanTimeout and leaves the tile's routes at their
// home slots instead of hanging.
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

// Broadcast values a rewrite tile stages, [max_broadcasts] each (rewrite_tile).
inline constexpr int kTileBroadcastArrays = 9;

// Shared-memory words of a rewrite tile: warp counts [kWarps][E] (then their exclusive prefixes),
// the row's counts [E], expert_broadcast [E], the broadcast values [kTileBroadcastArrays]
// [max_broadcasts] and the staged demand_end rows [max_broadcasts][P]
// (rewrite_detail::stages_demand only).
__host__ __device__ inline int tile_smem_words(int num_experts, int max_broadcasts, int num_ranks) {
  return (PlanRewriteConfig::kWarps + 2) * num_experts + kTileBroadcastArrays * max_broadcasts +
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

__device__ __forceinline__ void red_release_add(uint32_t* at, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(at), "r"(v) : "memory");
}

// true once *word == value (acquire); false after wait_ns without it.
inline __device__ __noinline__ bool wait_for_word(const uint32_t* word, uint32_t value,
                                                  long long wait_ns, int poll_ns) {
  const unsigned long long start = plan_detail::global_timer();
#pragma unroll 1
  while (load_acquire(word) != value) {
    if (static_cast<long long>(plan_detail::global_timer() - start) > wait_ns) return false;
    __nanosleep(poll_ns);
  }
  return true;
}

// dst[i] = src[i] for i < n, by the CTA: kBatch loads in flight per thread before the first
// shared store (an in-order warp would otherwise wait for each load at its store).
__device__ __forceinline__ void copy_words(int32_t* dst, const int32_t* src, int n, int tid) {
  constexpr int kBatch = 8;
  constexpr int kThreads = PlanRewriteConfig::kThreads;
#pragma unroll 1
  for (int first = tid; first < n; first += kBatch * kThreads) {
    int v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = first + k * kThreads;
      v[k] = i < n ? __ldcg(src + i) : 0;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = first + k * kThreads;
      if (i < n) dst[i] = v[k];
    }
  }
}

// Pass 1 of rewrite_tile: the ordinal of each of the lane's routes among the warp's routes of its
// expert (routes in order), counting them in my_counts (the warp's row); ids outside [-1, E) become
// -1 (no route). Returns whether the lane saw such an id.
template <int kRoutes>
__device__ __forceinline__ bool tile_ordinals(int (&id)[kRoutes], int (&ordinal)[kRoutes],
                                              int32_t* my_counts, int E, int lane) {
  const unsigned lanes_below = (1u << lane) - 1u;
  bool bad = false;
#pragma unroll
  for (int i = 0; i < kRoutes; ++i) {
    int v = id[i];
    if (v < -1 || v >= E) {
      bad = true;
      v = -1;
    }
    id[i] = v;
    const unsigned peers = __match_any_sync(PlanRewriteConfig::kFullMask, v);
    const int before = v >= 0 ? my_counts[v] : 0;
    __syncwarp();
    if (v >= 0 && lane == __ffs(peers) - 1) my_counts[v] = before + __popc(peers);
    ordinal[i] = before + __popc(peers & lanes_below);
    __syncwarp();
  }
  return bad;
}

// Pass 2 of rewrite_tile: per expert, the routes of earlier tiles and warps, as an exclusive
// prefix in place of warp_counts [kWarps][E]. Ends with a block barrier.
__device__ __forceinline__ void tile_prefix(const PlanRewriteParams& p, int row, int tile,
                                            int32_t* warp_counts, const int32_t* count_row,
                                            int tid) {
  using Config = PlanRewriteConfig;
  const int E = p.plan.num_experts;
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
    constexpr int kBatch = 8;  // loads in flight per thread
#pragma unroll 1
    for (int first = 0; first < tile; first += kBatch) {
      int v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        v[k] = first + k < tile ? __ldg(tiles + static_cast<int64_t>(first + k) * E + e) : 0;
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) run += v[k];
    }
#pragma unroll
    for (int w = 0; w < Config::kWarps; ++w) {
      warp_counts[w * E + e] = run;
      run += n[w];
    }
    stale |= last_tile && run != count_row[e];
  }
  if (__syncthreads_or(stale) && tid == 0) atomicOr(p.error_word, kGpuStaleTiles);
}

// One rewrite tile: routes [tile * kRouteTile, +kRouteTile) of row `row`, the slots of lane
// route i with i % num_parts == part (PlanRewriteParams::num_parts). stamps: the optional
// kGpuRewriteTimerSlots profiling stamps (thread 0 writes them), nullptr for all but one tile.
__device__ __forceinline__ void rewrite_tile(const PlanRewriteParams& p, int row, int tile,
                                             int part, uint32_t generation,
                                             unsigned long long* stamps) {
  using Config = PlanRewriteConfig;
  extern __shared__ int32_t smem[];
  __shared__ int published;
  const int tid = threadIdx.x;
  auto stamp = [&](int slot) {
    if (stamps != nullptr && tid == 0) stamps[slot] = plan_detail::global_timer();
  };
  stamp(0);
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
  int32_t* b_previous = b_helper + max_b;
  int32_t* b_supply_begin = b_previous + max_b;     // supply_begin[b][s]
  int32_t* b_supply_end = b_supply_begin + max_b;   // supply_begin[b][s + 1] (SourceRoutes)
  int32_t* b_demand_before = b_supply_end + max_b;  // demand_end[b][s - 1] (0 for s = 0)
  int32_t* staged_demand = b_demand_before + max_b;
  static_assert(kTileBroadcastArrays == 9, "the arrays above");

  // ---- plan-independent: ids, the row's counts, ordinals ----------------------------------
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  const int base = tile * kRouteTile + warp * Config::kWarpRoutes;
  int id[Config::kRoutesPerLane];
#pragma unroll
  for (int i = 0; i < Config::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    id[i] = idx < p.num_routes ? __ldg(ids + idx) : -1;
  }
  copy_words(count_row, p.plan.counts + (static_cast<int64_t>(plan_idx) * P + s) * E, E, tid);
  // The plan's lines into L2 (and their translations) while it is being made: its words are read
  // with ld.global.cg after the wait, so no stale copy can be read, only the wait shortened.
#pragma unroll 1
  for (int i = 32 * tid; i < p.plan.plan_words; i += 32 * Config::kThreads) {
    plan_detail::prefetch_l2(plan + i);
  }
#pragma unroll 1
  for (int i = tid; i < Config::kWarps * E; i += Config::kThreads) warp_counts[i] = 0;
  __syncthreads();

  // Pass 1: ordinal of each route among the warp's routes of its expert (routes in order).
  int32_t* my_counts = warp_counts + warp * E;
  int ordinal[Config::kRoutesPerLane];
  const bool bad = tile_ordinals(id, ordinal, my_counts, E, lane);
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGpuBadExpertId);

  // Pass 2: per expert, the routes of earlier tiles and warps, as an exclusive prefix in place.
  tile_prefix(p, row, tile, warp_counts, count_row, tid);
#pragma unroll
  for (int i = 0; i < Config::kRoutesPerLane; ++i) {
    if (id[i] >= 0) ordinal[i] += my_counts[id[i]];
  }

  // ---- the plan: wait for it, stage its tables of source rank s -----------------------------
  stamp(1);
  if (tid == 0) {
    published =
        wait_for_word(p.sync + kSyncReady + plan_idx, generation, p.wait_ns, p.poll_ns) ? 1 : 0;
    stamp(2);
  }
  __syncthreads();
  int plan_status = 0;
  int num_broadcasts = 0;
  int flags = 0;
  const bool staged = rewrite_detail::stages_demand(P, max_b);
  if (published != 0) {
    // NOTE: one load round: the header and the tables (every b < max_b, without waiting for B:
    // rows past B are never looked up, expert_broadcast maps only to b < B) are loaded together.
    plan_status = __ldcg(plan + GpuPlanLayout::kStatus);
    num_broadcasts = __ldcg(plan + GpuPlanLayout::kNumBroadcasts);
    flags = __ldcg(plan + GpuPlanLayout::kFlags);
    copy_words(expert_broadcast, plan + lay.expert_broadcast(), E, tid);
    if (staged) copy_words(staged_demand, plan + lay.demand_end(), max_b * P, tid);
#pragma unroll 1
    for (int b = tid; b < max_b; b += Config::kThreads) {
      const int32_t* rec = plan + lay.broadcasts() + b * GpuPlanLayout::kBroadcastWords;
      b_expert[b] = __ldcg(rec + GpuPlanLayout::kExpert);
      b_owner[b] = __ldcg(rec + GpuPlanLayout::kOwner);
      b_begin[b] = __ldcg(rec + GpuPlanLayout::kGroupBegin);
      b_size[b] = __ldcg(rec + GpuPlanLayout::kGroupSize);
      b_helper[b] = __ldcg(rec + GpuPlanLayout::kHelper);
      b_previous[b] = __ldcg(rec + GpuPlanLayout::kPrevious);
      b_supply_begin[b] = __ldcg(plan + lay.supply_begin() + b * P + s);
      b_supply_end[b] = s + 1 < P ? __ldcg(plan + lay.supply_begin() + b * P + s + 1)
                                  : __ldcg(plan + lay.demand_end() + b * P + P - 1);
      b_demand_before[b] = s > 0 ? __ldcg(plan + lay.demand_end() + b * P + s - 1) : 0;
    }
  }
  __syncthreads();
  stamp(3);
  const int B = plan_status == 0 ? num_broadcasts : 0;
  const bool owner_home = (flags & 1) != 0;
  if (published == 0 && tid == 0) atomicOr(p.error_word, kGpuPlanTimeout);
  if (plan_status != 0 && tile == 0 && tid == 0) atomicOr(p.error_word, kGpuPlanNotOk);

  // ---- slots ----------------------------------------------------------------------------------
  int32_t* out = p.slot_ids + static_cast<int64_t>(row) * p.num_routes;
#pragma unroll
  for (int i = 0; i < Config::kRoutesPerLane; ++i) {
    const int idx = base + i * 32 + lane;
    if (idx >= p.num_routes || i % p.num_parts != part) continue;
    const int v = id[i];
    int slot = -1;
    if (v >= 0) {
      const int b = B > 0 ? expert_broadcast[v] : -1;
      if (b < 0) {
        const int owner = v / H;
        slot = owner * (H + S) + (v - owner * H);
      } else {
        // diag and low as the rewrite kernel's views, from this route's own c[s][e].
        const rewrite_detail::SourceRoutes src = rewrite_detail::source_routes(
            count_row[v], b_supply_begin[b], b_supply_end[b], b_demand_before[b]);
        const int32_t* staged_row = staged_demand + b * P;
        const int32_t* global_row_b = plan + lay.demand_end() + b * P;
        slot = rewrite_detail::route_slot(
            src, [&](int d) { return staged ? staged_row[d] : __ldcg(global_row_b + d); },
            [&](int g) { return make_int4(b_begin[g], b_size[g], b_helper[g], b_previous[g]); }, b,
            v, b_owner[b], s, ordinal[i], P, H, S, owner_home);
      }
    }
    out[idx] = slot;
  }
  if (stamps != nullptr) {  // CTA-uniform: the barrier is safe
    __syncthreads();
    stamp(4);
  }
}

// CTA 0, thread 0, after plan 0 is published: once every other CTA has read the epoch, the next
// launch's epoch. NOTE: each CTA's add is a release after its epoch read, this load an acquire, so
// those reads happen before the store. If a CTA never counts itself (a bug), the epoch moves on
// after wait_ns all the same: that CTA would read the new epoch and wait for a generation no plan
// of this launch publishes, i.e. time out (kGpuPlanTimeout), never read a stale plan.
__device__ __forceinline__ void advance_epoch(const PlanRewriteParams& p, uint32_t generation) {
  if (!wait_for_word(p.sync + kSyncStarted, gridDim.x - 1, p.wait_ns, p.poll_ns)) {
    atomicOr(p.error_word, kGpuPlanTimeout);
  }
  p.sync[kSyncStarted] = 0;
  p.sync[kSyncEpoch] = generation;
}

}  // namespace plan_rewrite_detail

// CTAs [0, num_plans) plan (one plan each: launch_plan_rewrite needs num_plans < gridDim.x), the
// others take the rewrite tiles, tile w on CTA num_plans + w % (gridDim.x - num_plans).
// kIser == p.plan.iser (plan_cta).
template <bool kIser>
__global__ void __launch_bounds__(PlanRewriteConfig::kThreads, 1)
    plan_rewrite_kernel(const PlanRewriteParams p, const PlanSmem lay) {
  using namespace plan_rewrite_detail;
  __shared__ uint32_t epoch;
  const int tid = threadIdx.x;
  if (tid == 0) {
    epoch = load_relaxed(p.sync + kSyncEpoch);
    if (blockIdx.x != 0) red_release_add(p.sync + kSyncStarted, 1u);
  }
  __syncthreads();
  const uint32_t generation = epoch + 1u;
  const int cta = static_cast<int>(blockIdx.x);
  const int num_plans = p.plan.num_plans;
  if (cta < num_plans) {
    // NOTE: no register repair here: compiled into this kernel's body it made stages it never
    // runs slower at EP16 and EP32 (code placement; measured on the H200, docs/planner.md) for a
    // smaller gain at EP4; EP2-6 plans are repaired by phases instead (same plans).
    plan_cta<kIser, false>(p.plan, lay, cta);
    __syncthreads();  // every plan word written
    if (tid == 0) {
      // NOTE: the barrier orders every thread's plan writes before this gpu-scope release (the
      // cumulativity a grid barrier relies on); no separate fence is needed on the plan's path.
      store_release(p.sync + kSyncReady + cta, generation);
      if (cta == 0) advance_epoch(p, generation);
    }
    return;
  }
  const int num_works = p.num_rows * p.num_tiles * p.num_parts;
  const int stride = static_cast<int>(gridDim.x) - num_plans;
#pragma unroll 1
  for (int work = cta - num_plans; work < num_works; work += stride) {
    unsigned long long* stamps =
        p.plan.timer != nullptr && work == cta - num_plans && cta == num_plans
            ? p.plan.timer + kGpuPlanTimerSlots
            : nullptr;
    const int tile_idx = work / p.num_parts;
    rewrite_tile(p, tile_idx / p.num_tiles, tile_idx % p.num_tiles, work % p.num_parts, generation,
                 stamps);
    __syncthreads();  // the next tile reuses the shared memory
  }
}

}  // namespace iser::cuda
