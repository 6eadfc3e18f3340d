// Top-up exports of the `iser` policy's kept placement on the GPU (warp 0, after the first chain
// leveling), bit-exact with top_up_exports of the CPU (src/core/planner/iser_top_up.cpp, where
// the steps and tie rules are defined; docs/design.md §5): while the busiest rank h is above
// stop_at and owns fewer than S broadcasts, its hottest home expert without a broadcast goes to
// the aligned group (h outside, every member with a free helper slot) that absorbs the most up to
// the water level W = T (the GPU plans one team: the CPU's slack-0 team water level is T), filled
// coldest first; the broadcast is appended to the plan as the placement appends one. With
// `relay`, where no such group absorbs anything, a relay broadcast (nothing moved) into the
// finest such group with the lowest first rank ends the steps (the GPU planner runs the relay
// rounds always, as options.iser_relay).
// Scratch: P received-slot counts in a free candidate block (level_chains, given the same block,
// rebuilds its own scratch there at its start).
#pragma once

#include "cuda/plan_place.cuh"
#include "cuda/plan_stages.cuh"
#include "iser/planner.h"

namespace iser::cuda::plan_detail {

// The next free compact quota index after broadcasts [0, num_broadcasts): the placement stores
// them in order, each with its group's entries and the owner's when outside the group.
__device__ __forceinline__ int quota_end(const State& st, int num_broadcasts) {
  if (num_broadcasts == 0) return 0;
  const int b = num_broadcasts - 1;
  return st.b_quota_offset[b] + st.b_size[b] + (st.owner_in_group(b) ? 0 : 1);
}

// Step 3's group: the eligible aligned group without h absorbing the most, min(room, give)
// (ties: the finer level, then the lower first rank), one lane per group. Returns the group as
// level << 16 | begin and its absorbed routes in `absorbed` (0: none absorbs anything), and in
// `relay_begin` the first rank of the finest level's first eligible group without h (-1: none).
__device__ __forceinline__ int top_up_group(const State& st, const int* recv, int h, int water,
                                            int give, int lane, int& absorbed, int& relay_begin) {
  int best_absorbed = 0;
  unsigned best_tie = 0;  // larger is better: level << 16 | (0xffff − begin)
  unsigned first_eligible = ~0u;
  int num_groups = 0;
#pragma unroll 1
  for (int level = 0; level < st.num_levels; ++level) num_groups += 1 << level;
#pragma unroll 1
  for (int g = lane; g < num_groups; g += 32) {
    int level = 0;
    int index = g;  // group g: level l holds groups [2^l − 1, 2^(l+1) − 1)
    while (index >= (1 << level)) index -= 1 << level++;
    const int size = st.P >> level;
    const int begin = index * size;
    if (h >= begin && h < begin + size) continue;
    bool eligible = true;
    int room = 0;
#pragma unroll 1
    for (int m = begin; m < begin + size; ++m) {
      eligible = eligible && recv[m] < st.S;
      room += max(0, water - st.load[m]);
    }
    const int a = min(room, give);
    const unsigned tie = static_cast<unsigned>(level) << 16 | static_cast<unsigned>(0xffff - begin);
    if (eligible && a > 0 && (a > best_absorbed || (a == best_absorbed && tie > best_tie))) {
      best_absorbed = a;
      best_tie = tie;
    }
    if (eligible && level == st.num_levels - 1) {
      first_eligible = min(first_eligible, static_cast<unsigned>(begin));
    }
  }
  first_eligible = __reduce_min_sync(PlanConfig::kFullMask, first_eligible);
  relay_begin = first_eligible == ~0u ? -1 : static_cast<int>(first_eligible);
  absorbed = static_cast<int>(
      __reduce_max_sync(PlanConfig::kFullMask, static_cast<unsigned>(best_absorbed)));
  const unsigned tie =
      __reduce_max_sync(PlanConfig::kFullMask, best_absorbed == absorbed ? best_tie : 0u);
  return static_cast<int>(tie >> 16) << 16 | (0xffff - static_cast<int>(tie & 0xffffu));
}

// Step 4: the members of [begin, begin + size) take routes coldest first by (L, rank) up to
// water (member m takes clamp(give − Σ caps of the colder members, 0, its cap)), written at
// `offset`; their loads and helper slots are updated. Returns the routes moved (every lane).
__device__ __forceinline__ int top_up_fill(const State& st, int* recv, int begin, int size,
                                           int water, int give, int offset, int lane) {
  int moved = 0;
  int take[PlanConfig::kRankChunks];
#pragma unroll
  for (int k = 0; k < PlanConfig::kRankChunks; ++k) {
    const int m = begin + 32 * k + lane;
    take[k] = 0;
    if (32 * k + lane < size) {
      const int l = st.load[m];
      const unsigned key = static_cast<unsigned>(l) << 7 | static_cast<unsigned>(m);
      int before = 0;
#pragma unroll 1
      for (int m2 = begin; m2 < begin + size; ++m2) {
        const int l2 = st.load[m2];
        const unsigned key2 = static_cast<unsigned>(l2) << 7 | static_cast<unsigned>(m2);
        before += key2 < key ? max(0, water - l2) : 0;
      }
      take[k] = min(max(0, water - l), max(0, give - before));
      moved += take[k];
    }
  }
  moved = static_cast<int>(__reduce_add_sync(PlanConfig::kFullMask, static_cast<unsigned>(moved)));
  __syncwarp();  // every lane has read the loads before any is raised
#pragma unroll
  for (int k = 0; k < PlanConfig::kRankChunks; ++k) {
    const int m = begin + 32 * k + lane;
    if (32 * k + lane < size) {
      st.quota[offset + m - begin] = take[k];
      st.load[m] += take[k];
      recv[m] += 1;
    }
  }
  return moved;
}

// What top_up_exports did: the new number of broadcasts, and whether the last one is a relay
// broadcast (the steps then stopped, so the chains decide whether it carries routes).
struct TopUp {
  int num_broadcasts;
  bool relayed;
};

// One warp, every lane; called only when the max load was above stop_at before the chains.
// `scratch`: a candidate block of its own. Out of line, State by value (as level_chains).
inline __device__ __noinline__ TopUp top_up_exports(const State st, int num_broadcasts, int T,
                                                    int stop_at, int min_move, bool relay,
                                                    int* scratch, int lane) {
  bool relayed = false;
  int* recv = scratch;
#pragma unroll 1
  for (int r = lane; r < st.P; r += 32) {
    int n = 0;
#pragma unroll 1
    for (int b = 0; b < num_broadcasts; ++b) {
      n += r >= st.b_begin[b] && r < st.b_begin[b] + st.b_size[b] ? 1 : 0;
    }
    recv[r] = n;
  }
  __syncwarp();
  const int max_steps = st.P * st.S;
#pragma unroll 1
  for (int step = 0; step < max_steps; ++step) {
    // 1. The busiest rank (ties: the lowest rank) and its broadcasts.
    unsigned busiest = 0;
#pragma unroll 1
    for (int r = lane; r < st.P; r += 32) {
      busiest = max(busiest, static_cast<unsigned>(st.load[r]) << 7 | (127u - r));
    }
    busiest = __reduce_max_sync(PlanConfig::kFullMask, busiest);
    const int h = 127 - static_cast<int>(busiest & 127u);
    const int load_h = static_cast<int>(busiest >> 7);
    int sent = 0;
#pragma unroll 1
    for (int b = lane; b < num_broadcasts; b += 32) sent += st.b_owner[b] == h ? 1 : 0;
    sent = static_cast<int>(__reduce_add_sync(PlanConfig::kFullMask, static_cast<unsigned>(sent)));
    if (load_h <= stop_at || sent >= st.S) break;
    // 2. h's home expert with the largest hist and no broadcast (ties: the lowest id).
    unsigned best_hist = 0;
#pragma unroll 1
    for (int x = h * st.H + lane; x < (h + 1) * st.H; x += 32) {
      if (st.expert_broadcast[x] < 0) best_hist = max(best_hist, static_cast<unsigned>(st.hist[x]));
    }
    best_hist = __reduce_max_sync(PlanConfig::kFullMask, best_hist);
    if (best_hist == 0) break;  // none, or its hist is 0
    unsigned best_e = ~0u;
#pragma unroll 1
    for (int x = h * st.H + lane; x < (h + 1) * st.H; x += 32) {
      if (st.expert_broadcast[x] < 0 && static_cast<unsigned>(st.hist[x]) == best_hist) {
        best_e = min(best_e, static_cast<unsigned>(x));
      }
    }
    const int e = static_cast<int>(__reduce_min_sync(PlanConfig::kFullMask, best_e));
    // 3. The group absorbing the most up to W = T.
    const int water = T;
    const int give = min(load_h - water, static_cast<int>(best_hist));
    int absorbed = 0;
    int relay_begin = -1;
    const int group = top_up_group(st, recv, h, water, give, lane, absorbed, relay_begin);
    relayed = absorbed <= 0;
    if (relayed && (!relay || relay_begin < 0)) {
      relayed = false;
      break;
    }
    // min_move: no previous plan here, so never resident; a relay broadcast is exempt.
    if (!relayed && absorbed < min_move) break;
    const int level = relayed ? st.num_levels - 1 : group >> 16;
    const int begin = relayed ? relay_begin : group & 0xffff;
    const int size = st.P >> level;
    const int offset = quota_end(st, num_broadcasts);
    if (plan_overflows(st, num_broadcasts, offset, size + 1, lane)) {
      relayed = false;
      break;
    }
    // 4. The coldest-first fill (a relay group's members are all at or above W: they take 0); h
    // keeps hist[e] − moved, the broadcast is appended (h outside the group: its entry follows
    // the members').
    const int moved = top_up_fill(st, recv, begin, size, water, give, offset, lane);
    if (moved != absorbed) {  // the fill moves min(room, give): an internal error
      if (lane == 0) {
        atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), kGpuPlanInvariant);
      }
      relayed = false;
      break;
    }
    if (lane == 0) {
      st.quota[offset + size] = static_cast<int>(best_hist) - moved;
      store_broadcast(st, num_broadcasts, e, h, level, begin, size, offset);
      st.b_link[num_broadcasts] = -1;  // e had no broadcast
      st.load[h] -= moved;
    }
    ++num_broadcasts;
    __syncwarp();
    if (relayed) break;
  }
  __syncwarp();
  return {num_broadcasts, relayed};
}

}  // namespace iser::cuda::plan_detail
