// The `iser` policy's placement on the GPU, bit-exact with plan_iser of the CPU
// (src/core/planner/iser.cpp) without a previous plan: up to six candidate placements, each
// leveled (level_quotas), the best kept (lowest max load; ties: fewer remote copies, then the
// earlier candidate):
//   1. room-aware placement at water level T,
//   2. HALO-Q's placement (absorb and owner_in_group off),
//   3. for d = 256, 128, 64, 32 in turn (kIserSlackDivisorFinest ... Coarsest), only when the best
//      so far ends above T + T/d: room-aware placement at water level T + T/d.
// The kept one is finished, and the two breadth-first candidates are placed, leveled, finished
// and compared after it where it still ends above T + T/256 (plan_iser_finish.cuh).
// Every candidate starts from the home loads and reads only its own block of the shared arrays
// (PlanSmem::buffer_words apart) besides hist, home loads and HALO-Q's candidates, so the
// candidates are independent of each other and of which ones the CPU runs:
// - parallel (PlanParams::iser_blocks == kIserParallelBlocks): candidate k on warp k in block k,
//   the two breadth-first candidates on warps and blocks 6 and 7. Step 1 places all eight at once
//   and levels the first two; step 2 levels only the ladder candidates the CPU can run (water
//   level below the better of the first two: a ladder candidate's leveling often takes all
//   kIserLevelSteps · P steps, and on most real inputs the CPU runs none of them) and the
//   breadth-first ones where the CPU may (the better of the first two above T + T/256); then the
//   CPU's sequence of comparisons over the first six costs (a candidate the CPU would not run is
//   never compared), and the winner copied into block 0, where the later stages read the plan;
// - sequential (kIserSequentialBlocks, where the shared memory holds no more): warp 0 plans them
//   one after the other, the kept one in block 0 and the challenger in block 1, copied over when
//   it wins.
//
// Both kinds of placement are plan_detail::place (plan_place.cuh).
#pragma once

#include "cuda/plan_place.cuh"
#include "iser/planner.h"

namespace iser::cuda::plan_detail {

// Fresh per-expert state of one candidate placement in st's block (warp 0); the per-rank state
// starts from the home loads in registers (place_ranks).
inline __device__ void start_candidate(const State& st, bool room_aware, int lane) {
  __syncwarp();
  // HALO-Q's placement links no broadcasts: its plans keep -1 (the output stage walks the links).
#pragma unroll 1
  for (int b = lane; b < st.max_broadcasts; b += 32) st.b_link[b] = -1;
#pragma unroll 1
  for (int e = lane; e < st.E; e += 32) {
    st.expert_broadcast[e] = -1;
    if (room_aware) {
      st.left[e] = st.hist[e];
      st.spent[e] = 0;
    }
  }
  __syncwarp();
}

// Leveling of a candidate placement (warp 0), bit-exact with level_quotas of the CPU
// (src/core/planner/iser.cpp): for at most kIserLevelSteps · P steps, the busiest rank h (ties:
// the lowest rank) moves min(q[h], (L[h] − L[r]) / 2) routes to the least loaded other host r of
// the broadcast where h holds quota and r is furthest below h (ties: the lowest rank, then the
// earlier broadcast); it stops when no such r is at least 2 below h. A broadcast's hosts: the
// members of its group other than the owner, and the owner when the broadcast is its expert's
// latest (the one holding the owner's share; store_broadcast keeps expert_broadcast at it).
// Keys pack a load (< 2^25) with a rank (< 2^7) into 32 bits.
__device__ __forceinline__ bool hosts(const State& st, int b, int r) {
  return r == st.b_owner[b] ? st.expert_broadcast[st.b_expert[b]] == b
                            : r >= st.b_begin[b] && r < st.b_begin[b] + st.b_size[b];
}

inline __device__ void level_quotas(const State& st, int num_broadcasts, int lane) {
  __syncwarp();
  const int max_steps = kIserLevelSteps * st.P;
#pragma unroll 1
  for (int step = 0; step < max_steps; ++step) {
    unsigned key = 0;
#pragma unroll 1
    for (int r = lane; r < st.P; r += 32) {
      key = max(key, (static_cast<unsigned>(st.load[r]) << 7) | (127u - r));
    }
    key = __reduce_max_sync(PlanConfig::kFullMask, key);
    const int h = 127 - static_cast<int>(key & 127u);
    const int load_h = static_cast<int>(key >> 7);
    int best_b = -1;
    int best_r = -1;
    int best_gap = 1;  // a move needs L[h] − L[r] >= 2
#pragma unroll 1
    for (int base = 0; base < num_broadcasts; base += 32) {
      const int b = base + lane;
      const bool held = b < num_broadcasts && hosts(st, b, h) && st.quota[st.host_index(b, h)] > 0;
      unsigned mask = __ballot_sync(PlanConfig::kFullMask, held);
#pragma unroll 1
      while (mask != 0) {
        const int x = base + __ffs(mask) - 1;
        mask &= mask - 1;
        const int owner = st.b_owner[x];
        const int begin = st.b_begin[x];
        unsigned low = ~0u;
        if (owner != h && hosts(st, x, owner)) {
          low = (static_cast<unsigned>(st.load[owner]) << 7) | static_cast<unsigned>(owner);
        }
#pragma unroll 1
        for (int m = begin + lane; m < begin + st.b_size[x]; m += 32) {
          if (m != h && m != owner) {
            low = min(low, (static_cast<unsigned>(st.load[m]) << 7) | static_cast<unsigned>(m));
          }
        }
        low = __reduce_min_sync(PlanConfig::kFullMask, low);
        if (low != ~0u && load_h - static_cast<int>(low >> 7) > best_gap) {
          best_b = x;
          best_r = static_cast<int>(low & 127u);
          best_gap = load_h - static_cast<int>(low >> 7);
        }
      }
    }
    if (best_b < 0) break;
    if (lane == 0) {
      const int idx_h = st.host_index(best_b, h);
      const int moved = min(st.quota[idx_h], best_gap / 2);
      st.quota[idx_h] -= moved;
      st.quota[st.host_index(best_b, best_r)] += moved;
      st.load[h] -= moved;
      st.load[best_r] += moved;
    }
    __syncwarp();
  }
}

// Max load (high word) and remote copies (low word) of a candidate, as one comparable key:
// lower is better. Remote copies <= P * S < 2^11, max load < 2^25.
__device__ __forceinline__ unsigned long long candidate_cost(const State& st, int num_broadcasts,
                                                             int lane) {
  __syncwarp();
  unsigned max_load = 0;
#pragma unroll 1
  for (int r = lane; r < st.P; r += 32) max_load = max(max_load, static_cast<unsigned>(st.load[r]));
  max_load = __reduce_max_sync(PlanConfig::kFullMask, max_load);
  unsigned copies = 0;
#pragma unroll 1
  for (int b = lane; b < num_broadcasts; b += 32) {
    copies += static_cast<unsigned>(st.b_size[b] - (st.owner_in_group(b) ? 1 : 0));
  }
  copies = __reduce_add_sync(PlanConfig::kFullMask, copies);
  return (static_cast<unsigned long long>(max_load) << 32) | copies;
}

// Copies candidate block k over block 0, `thread` of `num_threads` copying threads: blocks are
// 16-byte aligned, whole int4s.
__device__ __forceinline__ void copy_block_to_0(const State& st, int k, int thread,
                                                int num_threads) {
  int4* to = reinterpret_cast<int4*>(st.load);
  const int4* from = reinterpret_cast<const int4*>(st.load + k * st.buffer_words);
#pragma unroll 1
  for (int i = thread; i < st.buffer_words / 4; i += num_threads) to[i] = from[i];
}

// Copies candidate block 1 over block 0 (warp 0).
__device__ __forceinline__ void keep_block_1(const State& st, int lane) {
  __syncwarp();
  copy_block_to_0(st, 1, lane, 32);
  __syncwarp();
}

// The sequential form (warp 0): leaves the kept candidate in st's own block (block 0; the
// challenger is planned in block 1 and copied over when it wins) and returns its number of
// broadcasts. Out of line: its code and second State view stay out of the HALO-Q path. State
// and PlanParams go by value (see trade() in plan_repair.cuh: by reference, every thread would
// store them to local memory at kernel start).
inline __device__ __noinline__ int place_iser_sequential(const State st, const PlanParams p, int T,
                                                         int lane) {
  State challenger = st;
  challenger.use_buffer(1);
  start_candidate(st, true, lane);
  int num_kept = place(st, p, T, T, true, lane);
  level_quotas(st, num_kept, lane);
  unsigned long long cost_kept = candidate_cost(st, num_kept, lane);
  // A challenger replaces the kept one only when strictly better (ties: the earlier candidate).
  auto challenge = [&](int num) {
    level_quotas(challenger, num, lane);
    const unsigned long long cost = candidate_cost(challenger, num, lane);
    if (cost < cost_kept) {
      cost_kept = cost;
      num_kept = num;
      keep_block_1(st, lane);
    }
  };
  start_candidate(challenger, false, lane);
  challenge(place(challenger, p, T, T, false, lane));
#pragma unroll 1
  for (int divisor = kIserSlackDivisorFinest; divisor >= kIserSlackDivisorCoarsest; divisor /= 2) {
    const int W = T + T / divisor;
    if (static_cast<int>(cost_kept >> 32) > W) {
      start_candidate(challenger, true, lane);
      challenge(place(challenger, p, T, W, true, lane));
    }
  }
  return num_kept;
}

inline constexpr int kIserLadderSteps = 4;  // divisors kIserSlackDivisorFinest .. Coarsest
// Candidates compared before the finish: room-aware at T, HALO-Q, the ladder.
inline constexpr int kIserPlacedCandidates = 2 + kIserLadderSteps;
inline constexpr int kIserBreadthFirstCandidates = 2;  // after the finish (plan_iser_finish.cuh)
static_assert(kIserSlackDivisorFinest == kIserSlackDivisorCoarsest << (kIserLadderSteps - 1) &&
                  kIserParallelBlocks == kIserPlacedCandidates + kIserBreadthFirstCandidates,
              "a candidate block per candidate placement");
// Water level of candidate k: T for the first two, then the slack ladder's T + T/d, then the
// breadth-first candidates' T and T + T/kIserSlackDivisorCoarsest.
__device__ __forceinline__ int candidate_water(int k, int T) {
  if (k < 2) return T;
  if (k < kIserPlacedCandidates) return T + T / (kIserSlackDivisorFinest >> (k - 2));
  return k == kIserPlacedCandidates ? T : T + T / kIserSlackDivisorCoarsest;
}
// The level above which the kept plan is finished and the breadth-first candidates run.
__device__ __forceinline__ int finish_level(int T) {
  return T + T / kIserSlackDivisorFinest;
}

// The parallel form's results: each candidate's cost and number of broadcasts; and, during the
// finish, the first breadth-first candidate whose result the CPU would not compute (the kept plan
// or an earlier breadth-first one ended at or below finish_level; kIserParallelBlocks: none).
struct IserCandidates {
  unsigned long long cost[kIserParallelBlocks];
  int num[kIserParallelBlocks];
  int discard_from;
  int second_choice_gate;  // the finest ladder's LadderStart::second_choice_gate
};
static __shared__ IserCandidates iser_candidates;

// The parallel form, step 1 (warp k < kIserParallelBlocks, every lane): candidate k placed in
// block k, its size to iser_candidates; the first two (k < 2) also leveled, their costs to
// iser_candidates. Out of line, State and PlanParams by value (as place_iser_sequential).
inline __device__ __noinline__ void place_candidate(const State st, const PlanParams p, int T,
                                                    int warp, int lane) {
  State mine = st;
  mine.use_buffer(warp);
  const bool room_aware = warp != 1;
  start_candidate(mine, room_aware, lane);
  const int n = place(mine, p, T, candidate_water(warp, T), room_aware, lane,
                      /*breadth_first=*/warp >= kIserPlacedCandidates);
  if (warp < 2) {
    level_quotas(mine, n, lane);
    const unsigned long long cost = candidate_cost(mine, n, lane);
    if (lane == 0) iser_candidates.cost[warp] = cost;
  }
  if (lane == 0) iser_candidates.num[warp] = n;
}

// Step 2 (warp k, 2 <= k < kIserParallelBlocks, every lane), after a block barrier that follows
// step 1: ladder candidate k leveled and its cost stored when the CPU can run it, i.e. when the
// better of the first two candidates ends above its water level; a breadth-first candidate
// leveled when that one ends above finish_level (its cost is stored again after its finish).
// NOTE: the CPU runs ladder candidate k only while the best so far ends above T + T/d_k, and the
// best so far is never above the better of the first two: a candidate skipped here is never
// compared by keep_best_candidate, so its cost (left as the largest key) is never read as one.
// The CPU runs the breadth-first candidates only when the finished kept plan ends above
// finish_level, and the kept plan is never above the better of the first two, nor raised by its
// finish: one skipped here is never finished nor compared (finish_parallel).
inline __device__ __noinline__ void level_ladder_candidate(const State st, int T, int warp,
                                                           int lane) {
  const unsigned long long first = min(iser_candidates.cost[0], iser_candidates.cost[1]);
  unsigned long long cost = ~0ull;
  const int level = warp < kIserPlacedCandidates ? candidate_water(warp, T) : finish_level(T);
  if (static_cast<int>(first >> 32) > level) {
    State mine = st;
    mine.use_buffer(warp);
    const int n = iser_candidates.num[warp];
    level_quotas(mine, n, lane);
    cost = candidate_cost(mine, n, lane);
  }
  __syncwarp();  // every lane has read the first two costs (lane 0 writes a slot beside them)
  if (lane == 0) iser_candidates.cost[warp] = cost;
}

// Step 3, by every thread of the CTA after a block barrier that follows step 2: the CPU's
// sequence of comparisons over the placed candidates' costs (a candidate the CPU would not run
// is never compared), the winner's block copied into block 0 (a block barrier must follow before
// its arrays are read). Returns the winner's number of broadcasts, its max load in `max_load`.
__device__ __forceinline__ int keep_best_candidate(const State& st, int T, int tid, int& max_load) {
  int kept = 0;
  unsigned long long cost_kept = iser_candidates.cost[0];
#pragma unroll 1
  for (int k = 1; k < kIserPlacedCandidates; ++k) {
    // The ladder's candidates run only while the best so far ends above their water level; a
    // challenger is kept only when strictly better (ties: the earlier candidate).
    const unsigned long long cost = iser_candidates.cost[k];
    if ((k < 2 || static_cast<int>(cost_kept >> 32) > candidate_water(k, T)) && cost < cost_kept) {
      kept = k;
      cost_kept = cost;
    }
  }
  if (kept != 0) copy_block_to_0(st, kept, tid, PlanConfig::kThreads);
  if (tid == 0) iser_candidates.discard_from = kIserParallelBlocks;  // the finish follows a barrier
  max_load = static_cast<int>(cost_kept >> 32);
  return iser_candidates.num[kept];
}

// Rank r's quota of b's expert summed over all its broadcasts: the rewrite of an expert
// broadcast more than once runs the north-west corner once on these combined quotas
// (rewrite_flows, src/core/rewrite.cpp), so the plan's rewrite tables of each of its broadcasts are
// those of the combined quotas. Sets `broken` when another broadcast of the expert has a group
// that meets b's: the rewrite gives a destination the helper slot of the first group holding it,
// and walks an expert's broadcasts latest first (GpuPlanLayout::kPrevious), which equals the
// CPU's plan order only while the groups are disjoint.
// NOTE: the room-aware placement never gives an expert meeting groups (meets_chain), so a broken
// plan here is an internal error (kGpuPlanInvariant), never a rewrite that differs from the CPU's.
__device__ __forceinline__ int expert_quota(const State& st, int b, int r, bool& broken) {
  const int begin = st.b_begin[b];
  const int end = begin + st.b_size[b];
  int sum = 0;
#pragma unroll 1
  for (int b2 = st.expert_broadcast[st.b_expert[b]]; b2 >= 0; b2 = st.b_link[b2]) {
    const int idx = st.host_index(b2, r);
    sum += idx >= 0 ? st.entry[idx].y : 0;
    broken |= b2 != b && st.b_begin[b2] < end && begin < st.b_begin[b2] + st.b_size[b2];
  }
  return sum;
}

}  // namespace iser::cuda::plan_detail
