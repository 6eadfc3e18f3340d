// HALO-Q planner kernel (docs/design.md §4.1-§4.4, §4.6): the all-gathered counts [P][E] -> one
// plan in the GpuPlanLayout, on one CTA per plan; PlanParams::iser swaps stage 2 for plan_iser's
// placement (plan_iser.cuh), the other stages unchanged. Placement and coloring: plan_place.cuh
// (HALO-Q placement for P <= 32: plan_place_lanes.cuh; for P = 4: plan_place_thread.cuh).
// Decisions are identical to the CPU reference planner (src/core/planner): same int32 arithmetic,
// same ties, same pass budget.
//
// Stages and who runs them:
//   1 hist, loads, T                    all threads: column sums in registers, coalesced
//     candidates                        one warp per owner: C max rounds over packed keys (H <=
//                                       96, C <= 8), one ranking pass (H <= 64) or C
//                                       warp-argmax rounds
//   2 placement (sequential passes)     warp 0, per-rank state in registers (P <= 72: <= 3
//                                       ranks per lane); every choice a warp reduction
//   3 slot coloring (sequential)        warp 0, used helper indices in registers, while (P <=
//                                       30 or scheduled repair; first, for P > 30)
//   6 transport modes, repair prep      warps 1.. (all, P > 30): one warp per broadcast
//   4 quota repair                      scheduled (default from P = 8): pair lists on those
//                                       warps, then on warp 1 levels (P > 24) and trades, a
//                                       lane per pair; by phases (below P = 8): one of those
//                                       warps per circle-method pair, a named barrier per
//                                       phase (GpuPlanner::set_repair_schedule, plan_repair.cuh)
//   out plan words + rewrite tables     all threads
// The broadcasts live in shared memory; quotas are stored compactly (group members, then the
// owner when it is outside) since Σ_b |G_b| <= P·S.
//
// NOTE: code size matters as much as the arithmetic: the planner runs after kernels that evict
// L2, so every instruction line it executes for the first time is an HBM fetch. Loops that need
// no unrolling say `#pragma unroll 1`, and the rare general repair path is out of line.
#pragma once

#include "cuda/plan_iser.cuh"
#include "cuda/plan_iser_chains.cuh"
#include "cuda/plan_iser_finish.cuh"
#include "cuda/plan_iser_top_up.cuh"
#include "cuda/plan_place.cuh"
#include "cuda/plan_place_lanes.cuh"
#include "cuda/plan_repair_schedule.cuh"
#include "cuda/plan_stages.cuh"

namespace iser::cuda {

namespace plan_detail {

// Optional stage timestamps of CTA 0 (kGpuPlanTimerSlots globaltimer values): `timer` is null
// unless the plan has them. Thread `by` stamps: thread 0 for the serial stages; the repair
// set-up, pair lists, levels and trades by the first side warp (warp 0 colours beside them).
struct StageTimer {
  unsigned long long* timer;

  __device__ __forceinline__ void stamp(int slot, int tid, int by = 0) const {
    if (timer != nullptr && tid == by) timer[slot] = global_timer();
  }
};

// The views of one plan's shared arrays (PlanSmem offsets into the dynamic shared memory).
__device__ __forceinline__ State make_state(const PlanParams& p, const PlanSmem& lay,
                                            int32_t* smem) {
  State st;
  st.P = p.num_ranks;
  st.E = p.num_experts;
  st.S = p.num_slots;
  st.H = st.E / st.P;
  st.C = min(st.S, st.H);
  st.num_levels = p.num_levels;
  st.max_broadcasts = p.max_broadcasts;
  st.quota_cap = st.P * st.S + p.max_broadcasts;
  st.hist = smem + lay.hist;
  st.expert_broadcast = smem + lay.expert_broadcast;
  st.candidates = smem + lay.candidates;
  st.load = smem + lay.load;
  st.home_load = smem + lay.home_load;
  st.b_expert = smem + lay.b_expert;
  st.b_owner = smem + lay.b_owner;
  st.b_level = smem + lay.b_level;
  st.b_begin = smem + lay.b_begin;
  st.b_size = smem + lay.b_size;
  st.b_helper = smem + lay.b_helper;
  st.b_mode = smem + lay.b_mode;
  st.b_quota_offset = smem + lay.b_quota_offset;
  st.b_link = smem + lay.b_link;
  st.left = smem + lay.left;
  st.spent = smem + lay.spent;
  st.buffer_words = lay.buffer_words;
  st.order = smem + lay.order;
  st.quota = smem + lay.quota;
  st.entry = reinterpret_cast<int2*>(smem + lay.entry);
  st.scalars = smem + lay.scalars;
  st.host_bits = reinterpret_cast<uint32_t*>(smem + lay.host_bits);
  st.list_bits = reinterpret_cast<uint32_t*>(smem + lay.list_bits);
  st.level_nodes = smem + lay.level_nodes;
  st.level_bytes = reinterpret_cast<uint8_t*>(smem + lay.level_bytes);
  st.pair_head = smem + lay.pair_head;
  st.rank_code = smem + lay.rank_code;
  st.pair_items = smem + lay.pair_items;
  st.level_table = smem + lay.level_table;
  return st;
}

__device__ __forceinline__ void set_status(const State& st, unsigned bits) {
  atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), bits);
}

// Stage 1a (all threads): zeroed arrays, hist as column sums of the counts, the route total and
// T into the scalars (kGpuBadCounts for a count matrix that cannot come from max_count routes
// per rank). Ends with a block barrier.
__device__ __forceinline__ void stage_hist(const State& st, const PlanSmem& lay,
                                           const int32_t* counts, int max_count, int32_t* smem,
                                           int tid) {
  const int P = st.P;
  const int E = st.E;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  __shared__ unsigned warp_routes[PlanConfig::kWarps];  // summed in 64 bits below
  if (tid < kScalarWords) st.scalars[tid] = 0;
#pragma unroll 1
  for (int e = tid; e < E; e += PlanConfig::kThreads) {
    st.hist[e] = 0;
    st.expert_broadcast[e] = -1;
  }
  // Stage 4's zeroed arrays (16-byte aligned, a multiple of 4 words).
#pragma unroll 1
  for (int i = lay.host_bits / 4 + tid; i < lay.zero_end / 4; i += PlanConfig::kThreads) {
    reinterpret_cast<int4*>(smem)[i] = make_int4(0, 0, 0, 0);
  }
  __syncthreads();
  // hist: column sums in registers. Thread t sums vector column t % cols over the rows
  // t / cols, + slices, ...: every count is loaded once, coalesced along the rows, with several
  // independent loads in flight per thread; one shared atomic per column and slice.
  bool bad = false;
  long long partial = 0;
  if ((E & 3) == 0 && (reinterpret_cast<uintptr_t>(counts) & 15) == 0) {
    column_sums<int4>(counts, P, E, max_count, st.hist, bad, partial, tid);
  } else {
    column_sums<int>(counts, P, E, max_count, st.hist, bad, partial, tid);
  }
  // Column sums fit int32 (c <= max_count, P <= 72); the total is checked in 64 bits so that
  // every later int32 quantity (loads, room, T * P, packed keys < 2^32) fits.
  // NOTE: without a bad count a thread's partial is <= 72 * 4 * 2^18 < 2^27, so a warp's sum
  // fits 32 bits (with one, the plan is rejected whatever the total).
  const unsigned warp_partial =
      __reduce_add_sync(PlanConfig::kFullMask, static_cast<unsigned>(partial));
  if (lane == 0) warp_routes[warp] = warp_partial;
  if (__any_sync(PlanConfig::kFullMask, bad) && lane == 0) set_status(st, kGpuBadCounts);
  __syncthreads();
  if (tid == 0) {
    unsigned long long total_routes = 0;  // 64-bit: checked before any int32 use
#pragma unroll
    for (int w = 0; w < PlanConfig::kWarps; ++w) total_routes += warp_routes[w];
    if (total_routes > static_cast<unsigned long long>(P) * max_count) {
      set_status(st, kGpuBadCounts);
    }
    const int total = static_cast<int>(total_routes);
    st.scalars[kTotalWord] = total;
    st.scalars[kTargetWord] = total / P + (total % P != 0 ? 1 : 0);
  }
}

// Stage 1b, one warp per owner: its home load, and its candidates = its first C home experts by
// (hist desc, id asc). H <= 96 and C <= 8: C rounds of one warp max over packed keys (hist << 7
// | 127 - i: distinct, larger for a larger hist and then a smaller id; 0 for no expert), the
// winner's key cleared after each; H <= 64 otherwise: each lane ranks its (at most two) experts
// against all H in one pass (ranks are a permutation, so ranks 0 .. C-1 fill every slot);
// otherwise C warp-argmax rounds, each the best below the previous pick. hist >= 0 whenever
// the plan is used.
// NOTE: the packed keys fit 32 bits: hist <= P * max_count < 72 * 2^18 < 2^25 whenever the
// counts are not rejected (and with rejected counts only the plan's status is used).
__device__ __forceinline__ void stage_candidates(const State& st, int warp, int lane) {
  const int H = st.H;
  const int C = st.C;
#pragma unroll 1
  for (int o = warp; o < st.P; o += PlanConfig::kWarps) {
    const int32_t* home = st.hist + o * H;
    int sum = 0;
#pragma unroll 1
    for (int i = lane; i < H; i += 32) sum += home[i];
    sum = __reduce_add_sync(PlanConfig::kFullMask, sum);
    if (lane == 0) {
      st.load[o] = sum;
      st.home_load[o] = sum;
    }
    if (H <= 96 && C <= 8) {
      unsigned key[3];
#pragma unroll
      for (int k = 0; k < 3; ++k) {
        const int i = lane + 32 * k;
        key[k] = i < H ? static_cast<unsigned>(home[i]) << 7 | static_cast<unsigned>(127 - i) : 0u;
      }
#pragma unroll 1
      for (int c = 0; c < C; ++c) {
        const unsigned best =
            __reduce_max_sync(PlanConfig::kFullMask, max(key[0], max(key[1], key[2])));
#pragma unroll
        for (int k = 0; k < 3; ++k) key[k] = key[k] == best ? 0u : key[k];
        if (lane == 0) st.candidates[o * C + c] = o * H + 127 - static_cast<int>(best & 127u);
      }
      continue;
    }
    if (H <= 64) {
      const int i0 = lane;
      const int i1 = lane + 32;
      const unsigned h0 = i0 < H ? static_cast<unsigned>(home[i0]) : 0u;
      const unsigned h1 = i1 < H ? static_cast<unsigned>(home[i1]) : 0u;
      int rank0 = 0;
      int rank1 = 0;
#pragma unroll 4
      for (int j = 0; j < H; ++j) {
        const unsigned h = static_cast<unsigned>(home[j]);
        rank0 += h > h0 || (h == h0 && j < i0) ? 1 : 0;
        rank1 += h > h1 || (h == h1 && j < i1) ? 1 : 0;
      }
      if (i0 < H && rank0 < C) st.candidates[o * C + rank0] = o * H + i0;
      if (i1 < H && rank1 < C) st.candidates[o * C + rank1] = o * H + i1;
      continue;
    }
    unsigned prev_h = 0xffffffffu;
    int prev_i = -1;
#pragma unroll 1
    for (int c = 0; c < C; ++c) {
      unsigned best_h = 0;
      int best_i = H;  // none
#pragma unroll 1
      for (int i = lane; i < H; i += 32) {  // ascending i: a strict > keeps the lowest id
        const unsigned h = static_cast<unsigned>(home[i]);
        const bool below = h < prev_h || (h == prev_h && i > prev_i);
        if (below && (best_i == H || h > best_h)) best_h = h, best_i = i;
      }
      prev_h = __reduce_max_sync(PlanConfig::kFullMask, best_i < H ? best_h : 0u);
      prev_i =
          __reduce_min_sync(PlanConfig::kFullMask, best_i < H && best_h == prev_h ? best_i : H);
      if (lane == 0) st.candidates[o * C + c] = o * H + min(prev_i, H - 1);
    }
  }
}

// Stage 6 and the repair set-up, one warp per broadcast b: own routes of its hosts (the repair's
// entries), then its sorted position (by expert, then plan order), whether its group is pure and
// whether b is its owner's coarsest in-group broadcast, with the lanes splitting the other
// broadcasts; each host's bit of b's sorted position (stage 4).
__device__ __forceinline__ void stage_modes(const State& st, const int32_t* counts, int B,
                                            int side_warp, int num_side_warps, int lane) {
  const int E = st.E;
#pragma unroll 1
  for (int b = side_warp; b < B; b += num_side_warps) {
    const int expert = st.b_expert[b];
    const int begin = st.b_begin[b];
    const int size = st.b_size[b];
    const int owner = st.b_owner[b];
    const int level = st.b_level[b];
    const bool owner_in = owner >= begin && owner < begin + size;
    const int entries = size + (owner_in ? 0 : 1);
#pragma unroll 1
    for (int i = lane; i < entries; i += 32) {
      const int r = i < size ? begin + i : owner;
      const int idx = st.b_quota_offset[b] + i;
      st.entry[idx] = make_int2(counts[static_cast<int64_t>(r) * E + expert], st.quota[idx]);
    }
    int rank = 0;
    bool impure = false;
    bool finer = false;  // an in-group broadcast of the owner before b in (level, plan) order
#pragma unroll 1
    for (int b2 = lane; b2 < B; b2 += 32) {
      const int e2 = st.b_expert[b2];
      rank += (e2 < expert || (e2 == expert && b2 < b)) ? 1 : 0;
      const int begin2 = st.b_begin[b2];
      const int size2 = st.b_size[b2];
      const bool meet = begin2 < begin + size && begin < begin2 + size2;
      impure |= meet && (begin2 != begin || size2 != size || !st.owner_in_group(b2));
      const int level2 = st.b_level[b2];
      finer |= b2 != b && st.b_owner[b2] == owner && st.owner_in_group(b2) &&
               (level2 < level || (level2 == level && b2 < b));
    }
    rank = __reduce_add_sync(PlanConfig::kFullMask, rank);
    const int words = (B + 31) / 32;  // host bits for stage 4 (plan_repair.cuh)
#pragma unroll 1
    for (int i = lane; i < entries; i += 32) {
      const int r = i < size ? begin + i : owner;
      atomicOr(&st.host_bits[r * words + rank / 32], 1u << (rank % 32));
    }
    const bool pure = !__any_sync(PlanConfig::kFullMask, impure);
    const bool coarsest = !__any_sync(PlanConfig::kFullMask, finer);
    if (lane == 0) {
      st.order[rank] = b;
      st.b_mode[b] = static_cast<int>(owner_in && (pure || coarsest) ? TransportMode::kOwnerDirect
                                                                     : TransportMode::kSami);
    }
  }
}

// Stage 4, quota repair, on the side warps (named barrier 2 of num_side_warps warps) after
// stage_modes: scheduled (pair lists, levels, trades on the first side warp), by phases (the
// default below kGpuScheduledRepairMinRanks, and the fallback when the pair lists overflow), or
// with every quota in registers (kRegisterRepair, up to kRegisterRepairMaxRanks ranks with B <=
// 32). Stamps 4-6.
template <bool kRegisterRepair>
__device__ __forceinline__ void stage_repair(const State& st, const PlanParams& p,
                                             const PlanSmem& lay, const StageTimer& timer, int B,
                                             int first_warp, int tid) {
  const int P = st.P;
  const int lane = tid & 31;
  const int side_warp = (tid >> 5) - first_warp;
  const int num_side_warps = PlanConfig::kWarps - first_warp;
  const int side_tid = tid - 32 * first_warp;
  const int side_threads = num_side_warps * 32;
  bool by_phases = B >= 2 && !p.scheduled_repair;
  if (B >= 2 && p.scheduled_repair) {
    build_pair_lists(st, B, side_tid, side_threads);
    named_barrier(2, side_threads);
    timer.stamp(4, tid, 32 * first_warp);
    if (st.scalars[kPoolTopWord] <= kPairPoolWords) {
      int deepest = -1;  // the rotation walk (or no levels: P <= kPhaseStepMaxRanks)
      if (P > kPhaseStepMaxRanks &&
          st.scalars[kNodeCountWord] <= min(kMaxLevelNodes, side_threads)) {
        level_pass_parallel(st, side_tid, side_threads);
        named_barrier(2, side_threads);
        deepest = st.scalars[kDeepestWord];
      }
      if (side_warp == 0) {
        repair_scheduled(P, lay.entry, lay.pair_head, lay.rank_code, lay.rotations, lay.pair_items,
                         lay.level_table, lay.scalars, deepest, lane,
                         timer.timer != nullptr && lane == 0 ? timer.timer + 5 : nullptr);
      }
    } else {
      by_phases = true;  // side-warp-uniform: every side warp read the same pool top
    }
  } else {
    timer.stamp(4, tid, 32 * first_warp);
  }
  if (by_phases || B < 2) timer.stamp(5, tid, 32 * first_warp);
  const bool in_registers =
      kRegisterRepair && by_phases && P <= kRegisterRepairMaxRanks && B <= 32;  // CTA-uniform
  if (in_registers) {
    if (side_warp == 0) {
      repair_registers(st.order, st.b_begin, st.b_size, st.b_owner, st.b_quota_offset, st.entry, P,
                       B, lane);
    }
  } else if (by_phases) {
    repair_by_phases(st, B, side_warp, num_side_warps, lane);
  }
  timer.stamp(6, tid, 32 * first_warp);
  // NOTE: the block barrier after this stage orders every trade before the output stage. The
  // side warps also meet here first because compute-sanitizer racecheck otherwise reports
  // hazards between the scheduled trades (the first side warp, whose last barrier was the pair
  // lists') and the output stage's quota reads (warp 0, which is not in this barrier, so it
  // orders nothing for it); with this barrier racecheck reports none and the plans are the same.
  // Keeping racecheck clean keeps it useful for real races.
  if (p.scheduled_repair || in_registers) named_barrier(2, side_threads);
}

// Stages 3, 6 and 4 after the placement: slot coloring on warp 0, and beside it on warps 1..
// the transport modes, the repair set-up and the quota repair. NOTE: coloring writes only
// b_helper and the status word, which the repair never reads; both are read after the block
// barrier that ends this stage. The phase repair with more circle-method pairs than the 15 side
// warps (P > 30) would run two or three pairs per warp and phase: there warp 0 colours first and
// all 16 warps repair.
template <bool kIser, bool kRegisterRepair>
__device__ __forceinline__ void stage_color_repair(const State& st, const PlanParams& p,
                                                   const PlanSmem& lay, const StageTimer& timer,
                                                   const int32_t* counts, int B, int tid) {
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const bool beside = p.scheduled_repair || (st.P + (st.P & 1)) / 2 < PlanConfig::kWarps;
  if (!beside) {  // CTA-uniform: the barrier is safe
    if (warp == 0) {
      color(st, B, lane);
      timer.stamp(8, tid);
    }
    __syncthreads();
  }
  const int first_warp = beside ? 1 : 0;
  const int num_side_warps = PlanConfig::kWarps - first_warp;
  if (beside && warp == 0) {
    color(st, B, lane);
    timer.stamp(8, tid);
  } else {
    stage_modes(st, counts, B, warp - first_warp, num_side_warps, lane);
    named_barrier(2, num_side_warps * 32);
    timer.stamp(3, tid, 32 * first_warp);
    stage_repair<kRegisterRepair>(st, p, lay, timer, B, first_warp, tid);
  }
  __syncthreads();
}

// Output stage, one warp per broadcast: quotas and north-west-corner rewrite tables, and the
// invariant check (quotas >= 0 that sum to the expert's hist; kIser: an expert's tables and check
// use its quota summed over all its broadcasts, expert_quota in plan_iser.cuh). Ends with a block
// barrier.
template <bool kIser>
__device__ __forceinline__ void stage_tables(const State& st, const int32_t* counts, int32_t* plan,
                                             const GpuPlanLayout& out, int B, int warp, int lane) {
  const int P = st.P;
  const int E = st.E;
#pragma unroll 1
  for (int b = warp; b < B; b += PlanConfig::kWarps) {
    const int expert = st.b_expert[b];
    int supply_carry = 0;
    int demand_carry = 0;
    int quota_sum = 0;
    bool broken = false;
#pragma unroll 1
    for (int base = 0; base < P; base += 32) {
      const int r = base + lane;
      int c = 0;
      int q = 0;
      int q_all = 0;  // ISER: the expert's quota over all its broadcasts (plan_iser.cuh)
      if (r < P) {
        c = counts[static_cast<int64_t>(r) * E + expert];
        const int idx = st.host_index(b, r);
        q = idx >= 0 ? st.entry[idx].y : 0;
        q_all = kIser ? expert_quota(st, b, r, broken) : q;
      }
      broken |= q < 0;
      const int diag = min(c, q_all);
      const int supply = c - diag;
      const int demand = q_all - diag;
      int incl[2] = {supply, demand};  // both scans in one chain
      warp_inclusive_scans(incl, lane, P - base);
      const int supply_incl = incl[0];
      const int demand_incl = incl[1];
      if (r < P) {
        const int64_t at = static_cast<int64_t>(b) * P + r;
        plan[out.quotas() + at] = q;
        plan[out.supply_begin() + at] = supply_carry + supply_incl - supply;
        plan[out.demand_end() + at] = demand_carry + demand_incl;
      }
      supply_carry += __shfl_sync(PlanConfig::kFullMask, supply_incl, 31);
      demand_carry += __shfl_sync(PlanConfig::kFullMask, demand_incl, 31);
      quota_sum += __reduce_add_sync(PlanConfig::kFullMask, q_all);
    }
    broken = __any_sync(PlanConfig::kFullMask, broken) || quota_sum != st.hist[expert];
    if (broken && lane == 0) set_status(st, kGpuPlanInvariant);
  }
  __syncthreads();
}

// The plan's header, loads, broadcast records and expert -> broadcast map (all threads). A plan
// whose status is not 0 carries no broadcasts and the home loads.
template <bool kIser>
__device__ __forceinline__ void write_plan_words(const State& st, const PlanParams& p,
                                                 const PlanSmem& lay, int32_t* plan,
                                                 const GpuPlanLayout& out, int T, int B,
                                                 bool owner_home, int tid) {
  const int status = st.scalars[kStatusWord];
  const int num_out = status == 0 ? B : 0;  // a failed plan moves nothing
  if (tid == 0) {
    plan[GpuPlanLayout::kStatus] = status;
    plan[GpuPlanLayout::kTarget] = T;
    plan[GpuPlanLayout::kNumBroadcasts] = num_out;
    plan[GpuPlanLayout::kFlags] = owner_home ? 1 : 0;
    plan[GpuPlanLayout::kNumRanks] = st.P;
    plan[GpuPlanLayout::kNumExperts] = st.E;
    plan[GpuPlanLayout::kNumSlots] = st.S;
    plan[GpuPlanLayout::kMaxBroadcasts] = p.max_broadcasts;
  }
#pragma unroll 1
  for (int r = tid; r < st.P; r += PlanConfig::kThreads) {
    plan[out.loads() + r] = status == 0 ? st.load[r] : st.home_load[r];
  }
  const int field_stride = lay.b_owner - lay.b_expert;
#pragma unroll 1
  for (int i = tid; i < num_out * GpuPlanLayout::kBroadcastWords; i += PlanConfig::kThreads) {
    // NOTE: b_expert .. b_mode are consecutive equal-stride arrays in BroadcastField order.
    const int b = i / GpuPlanLayout::kBroadcastWords;
    const int field = i % GpuPlanLayout::kBroadcastWords;
    // ISER: kPrevious links an expert's broadcasts (plan_iser.cuh); HALO-Q has one per expert.
    const int v = field <= GpuPlanLayout::kMode ? st.b_expert[field * field_stride + b]
                  : kIser                       ? st.b_link[b]
                                                : -1;
    plan[out.broadcasts() + i] = v;
  }
#pragma unroll 1
  for (int e = tid; e < st.E; e += PlanConfig::kThreads) {
    plan[out.expert_broadcast() + e] = status == 0 ? st.expert_broadcast[e] : -1;
  }
}

}  // namespace plan_detail

// kIser == p.iser: one instantiation per policy family, so the HALO-Q kernel carries none of
// iser's placement code (smaller text: fewer cold instruction fetches after an L2 flush).
// One plan (plan_idx of p.counts / p.plans) on the calling CTA of PlanConfig::kThreads threads,
// its dynamic shared memory laid out by `lay`. Every thread of the CTA must call it. The plan
// words are written by all threads: a caller that publishes them (plan_rewrite.cuh) needs a
// block barrier first. kRegisterRepair: the register repair up to kRegisterRepairMaxRanks ranks
// (plan_repair.cuh); without it those plans are repaired by phases (same plans).
template <bool kIser, bool kRegisterRepair = true>
__device__ __forceinline__ void plan_cta(const PlanParams& p, const PlanSmem& lay, int plan_idx) {
  using namespace plan_detail;
  extern __shared__ int32_t smem[];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const StageTimer timer{plan_idx == 0 ? p.timer : nullptr};
  timer.stamp(0, tid);
  const int32_t* counts = p.counts + static_cast<int64_t>(plan_idx) * p.num_ranks * p.num_experts;
  // The counts come from HBM (the kernels before the planner evict L2): start their lines towards
  // L2 now, so that the fetch overlaps the set-up and the zeroing barrier below instead of
  // following them. One 128-byte line per thread and step.
#pragma unroll 1
  for (int i = tid * 32; i < p.num_ranks * p.num_experts; i += PlanConfig::kThreads * 32) {
    prefetch_l2(counts + i);
  }
  const State st = make_state(p, lay, smem);
  int32_t* plan = p.plans + static_cast<int64_t>(plan_idx) * p.plan_words;
  const GpuPlanLayout out{st.P, st.E, st.S, p.max_broadcasts};

  // ---- stage 1: hist, loads, T, candidates ---------------------------------------------------
  stage_hist(st, lay, counts, p.max_count, smem, tid);
  stage_candidates(st, warp, lane);
  __syncthreads();
  const int T = st.scalars[kTargetWord];
  timer.stamp(1, tid);

  // ---- stage 2: placement (warp 0; ISER: its candidate warps, plan_iser.cuh) ---------------
  if (kIser && p.iser_blocks == kIserParallelBlocks) {  // CTA-uniform: the barriers are safe
    // NOTE: every thread reads stage 1's status before a placement can set a bit in it
    // (kGpuPlanOverflow), so `run` is CTA-uniform. Block barriers, not named ones among the
    // candidate warps: compute-sanitizer racecheck then reported hazards across the later block
    // barriers (its barrier accounting), none with these.
    const bool run = st.scalars[kStatusWord] == 0;
    __syncthreads();
    if (run && warp < kIserParallelBlocks) place_candidate(st, p, T, warp, lane);
    __syncthreads();
    if (run && warp >= 2 && warp < kIserParallelBlocks) level_ladder_candidate(st, T, warp, lane);
    __syncthreads();
    // NOTE: only placements (step 1) set status bits before finish_parallel, so the status read
    // here is CTA-uniform; a placement that overflowed leaves max_load 0 (no finish).
    int max_load = 0;
    int num_broadcasts = 0;
    if (run && st.scalars[kStatusWord] == 0) {
      num_broadcasts = keep_best_candidate(st, T, tid, max_load);
    }
    __syncthreads();
    // The finish and the breadth-first candidates (plan_iser_finish.cuh; docs/design.md §5),
    // where the kept placement ends above finish_level (max_load is CTA-uniform).
    num_broadcasts = finish_parallel(st, p, T, num_broadcasts, max_load, warp, lane, tid);
    if (tid == 0) st.scalars[kNumBroadcastsWord] = num_broadcasts;
  } else if (warp == 0) {
    int num_broadcasts = 0;
    if (st.scalars[kStatusWord] == 0) {
      if constexpr (kIser) {
        num_broadcasts = place_iser_sequential(st, p, T, lane);
        // The finish and the breadth-first candidates (plan_iser_finish.cuh), where the kept
        // placement ends above finish_level: the first test made here, inline (most real inputs
        // end at or below it, and the call would cost its set-up and instruction fetches).
        __syncwarp();  // the placement's status bits are visible to every lane
        int max_load = 0;
#pragma unroll 1
        for (int r = lane; r < st.P; r += 32) max_load = max(max_load, st.load[r]);
        max_load = __reduce_max_sync(PlanConfig::kFullMask, max_load);
        if (st.scalars[kStatusWord] == 0 && max_load > finish_level(T)) {
          num_broadcasts = finish_sequential(st, p, T, num_broadcasts, lane);
        }
      } else {
        num_broadcasts = place_halo_q(st, p, T, lane);
      }
    }
    if (lane == 0) st.scalars[kNumBroadcastsWord] = num_broadcasts;
  }
  __syncthreads();
  const int B = st.scalars[kNumBroadcastsWord];
  timer.stamp(2, tid);

  // ---- stages 3, 6, 4: coloring beside transport modes and quota repair ----------------------
  stage_color_repair<kIser, kRegisterRepair>(st, p, lay, timer, counts, B, tid);

  // ---- output: quotas and rewrite tables, invariant checks, plan words -----------------------
  stage_tables<kIser>(st, counts, plan, out, B, warp, lane);
  write_plan_words<kIser>(st, p, lay, plan, out, T, B, p.owner_home || kIser, tid);
  if (timer.timer != nullptr) {  // CTA-uniform: the barrier is safe
    __syncthreads();
    timer.stamp(7, tid);
  }
}

template <bool kIser>
__global__ void __launch_bounds__(PlanConfig::kThreads, 1)
    plan_kernel(const PlanParams p, const PlanSmem lay) {
  plan_cta<kIser>(p, lay, static_cast<int>(blockIdx.x));
}

}  // namespace iser::cuda
