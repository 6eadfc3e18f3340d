// The finish of the `iser` policy's plan on the GPU, bit-exact with the end of plan_iser of the
// CPU (src/core/planner/iser.cpp; docs/design.md §5): the kept placement (block 0) is leveled
// along chains of hosts, topped up and, when top-up added a broadcast, leveled along chains
// again, then relay rounds (top-up exports ending with a relay broadcast, and chains); then, while
// it still ends above finish_level (T + T/256), the two breadth-first candidates (water level T,
// then T + T/kIserSlackDivisorCoarsest; plan_iser.cuh), leveled and finished the same way, each
// replace it when strictly better (lower max load; ties: fewer remote copies). Chains and top-up
// take a free candidate block as scratch:
// - parallel (finish_parallel, every warp): the breadth-first candidates were placed in blocks 6
//   and 7 beside the others and leveled in step 2; warp 0 finishes the kept plan (scratch: block
//   1) while warps 6 and 7 finish them (scratch: blocks 2 and 3, free once the kept placement
//   sits in block 0), then the CPU's two comparisons, and the winner copied into block 0;
// - sequential (finish_sequential, warp 0): the kept plan finished (scratch: block 1), then each
//   breadth-first candidate the CPU runs placed, leveled and finished in block 1 (scratch: the
//   stage-4 pair lists, pair_head .. pair_items, which stage 4 writes before it reads them),
//   copied over block 0 when it wins. So the sequential form needs two candidate blocks only.
// Then, still above finish_level with the helper slots nearly spent, the finest ladder: the
// room-aware placement on the finest groups only at kIserFinestLadderSteps water levels, each
// leveled and finished, the CPU's comparisons in rung order; then, while the best plan ends
// above max(lowest water level, finish_level), the upper kIserSecondChoiceRungs rungs in their
// second-choice form (the first broadcast in the group chosen with the rule's own choice left
// out). Parallel (ladder_rung_warp): the rungs of one form at once on warps 1 ..
// kIserFinestLadderSteps in their own blocks, the winner copied into block 0, then the other
// form; sequential (finest_ladder, warp 0): one after the other in block 1, copied over block 0
// when strictly better.
#pragma once

#include <climits>

#include "cuda/plan_iser.cuh"
#include "cuda/plan_iser_chains.cuh"
#include "cuda/plan_iser_top_up.cuh"
#include "cuda/plan_place.cuh"
#include "iser/planner.h"

namespace iser::cuda::plan_detail {

static_assert(kIserSequentialBlocks >= 2 && kIserParallelBlocks >= kIserSequentialBlocks &&
                  2 + kIserBreadthFirstCandidates <= kIserPlacedCandidates,
              "the kept plan, a challenger and each finish's scratch have room of their own");

// Candidate block k of st's layout (its first word).
__device__ __forceinline__ int* candidate_block(const State& st, int k) {
  return st.load + k * st.buffer_words;
}

// True when broadcast b's group members hold no quota (one warp, every lane; b's owner is
// outside its group, as for every top-up broadcast).
__device__ __forceinline__ bool moves_nothing(const State& st, int b, int lane) {
  bool moves = false;
#pragma unroll 1
  for (int i = lane; i < st.b_size[b]; i += 32)
    moves = moves || st.quota[st.b_quota_offset[b] + i] > 0;
  return !__any_sync(PlanConfig::kFullMask, moves);
}

// One candidate's finish in st's block (one warp, every lane), the CPU's finish_candidate:
// chains, top-up exports and, when they added a broadcast, chains again; then relay rounds (top-up
// exports that may end with a relay broadcast, each followed by the chains) until a round adds
// nothing or no relay broadcast, or the chains leave its relay broadcast unused (removed). Each
// step only while the max load is above stop_at (below it none changes the plan). `scratch`: a
// free candidate block. `discarded` (the parallel form's breadth-first warps): checked before the
// finish and each relay round, true once the CPU would not compute this candidate; the finish then
// stops (its result is never compared, so where it stops does not matter). Returns the new number
// of broadcasts.
template <typename Discarded>
__device__ __forceinline__ int finish_candidate(const State& st, int num_broadcasts, int T,
                                                int stop_at, int min_move, int* scratch, int lane,
                                                Discarded&& discarded) {
  if (discarded()) return num_broadcasts;
  int max_load = 0;
#pragma unroll 1
  for (int r = lane; r < st.P; r += 32) max_load = max(max_load, st.load[r]);
  if (__reduce_max_sync(PlanConfig::kFullMask, max_load) <= stop_at) return num_broadcasts;
  level_chains(st, num_broadcasts, stop_at, scratch, lane);
  const int topped =
      top_up_exports(st, num_broadcasts, T, stop_at, min_move, false, scratch, lane).num_broadcasts;
  if (topped > num_broadcasts) level_chains(st, topped, stop_at, scratch, lane);
  num_broadcasts = topped;
#pragma unroll 1
  for (int round = 0; round < st.P * st.S && !discarded(); ++round) {
    const TopUp relay =
        top_up_exports(st, num_broadcasts, T, stop_at, min_move, true, scratch, lane);
    if (relay.num_broadcasts == num_broadcasts) break;
    num_broadcasts = relay.num_broadcasts;
    level_chains(st, num_broadcasts, stop_at, scratch, lane);
    if (!relay.relayed) break;
    const int b = num_broadcasts - 1;
    if (moves_nothing(st, b, lane)) {
      // NOTE: its owner holds all hist[e] routes of it, as with e at home (loads unchanged), and
      // e had no broadcast before it (top-up's choice): removing it restores that.
      if (lane == 0) st.expert_broadcast[st.b_expert[b]] = -1;
      __syncwarp();
      return b;
    }
  }
  return num_broadcasts;
}

// The slot budget's water level (slot_budget_water of the CPU, one team; every lane returns it):
// with B = P · S / g < P (g: the finest group size), the home load at position B of the ranks
// sorted busiest first (rank r is there when fewer than B + 1 loads are above its own and more
// than B are at least as high); 0 when B >= P.
__device__ __forceinline__ int slot_budget_water(const State& st, int lane) {
  const int P = st.P;
  const int budget = P * st.S / (P >> (st.num_levels - 1));
  if (budget >= P) return 0;
  int value = 0;
#pragma unroll 1
  for (int r = lane; r < P; r += 32) {
    const int own = st.home_load[r];
    int above = 0;
    int at_least = 0;
#pragma unroll 1
    for (int j = 0; j < P; ++j) {
      const int x = st.home_load[j];
      above += x > own ? 1 : 0;
      at_least += x >= own ? 1 : 0;
    }
    if (above <= budget && budget < at_least) value = own;
  }
  return static_cast<int>(__reduce_max_sync(PlanConfig::kFullMask, static_cast<unsigned>(value)));
}

// Where the finest ladder starts (the end of plan_iser; one warp, every lane): it runs where the
// kept plan (st's block, num_kept broadcasts) ends above finish_level with its helper slots
// nearly spent (the CPU's slots_nearly_spent, one team: at most 1/kIserFinestLadderFreeDivisor
// of them free), over water levels W_j = lowest + (top − lowest) · j /
// kIserFinestLadderSteps (lowest = max(T, the slot budget's water level), top = the kept plan's
// max load); each rung, room-aware placement on the finest groups only, is leveled and finished
// and replaces the kept plan when strictly better (lower max load; ties: fewer remote copies).
struct LadderStart {
  unsigned long long cost_kept = 0;  // the kept plan's candidate_cost
  int lowest = 0;
  int top = 0;
  bool run = false;

  __device__ __forceinline__ int water(int j) const {
    return lowest +
           static_cast<int>(static_cast<long long>(top - lowest) * j / kIserFinestLadderSteps);
  }
  // The second-choice rungs run only while the best plan so far ends above this level (the CPU's
  // max(lowest, stop_at)); never when the ladder does not run.
  __device__ __forceinline__ int second_choice_gate(int T) const {
    return run ? max(lowest, finish_level(T)) : INT_MAX;
  }
};

__device__ __forceinline__ LadderStart ladder_start(const State& st, int T, int num_kept,
                                                    int lane) {
  LadderStart l;
  l.cost_kept = candidate_cost(st, num_kept, lane);
  l.top = static_cast<int>(l.cost_kept >> 32);
  if (l.top <= finish_level(T)) return l;
  int used = 0;
#pragma unroll 1
  for (int b = lane; b < num_kept; b += 32) used += st.b_size[b];
  used = static_cast<int>(__reduce_add_sync(PlanConfig::kFullMask, static_cast<unsigned>(used)));
  if ((st.P * st.S - used) * kIserFinestLadderFreeDivisor > st.P * st.S) return l;
  l.lowest = max(T, slot_budget_water(st, lane));
  l.run = l.lowest < l.top;
  return l;
}

// One rung of the ladder in `mine`'s block (one warp, every lane): placed at `water` on the
// finest groups (second_choice: its first broadcast in the group chosen with the rule's own
// choice left out), leveled, finished (scratch: a free block or the stage-4 pair lists). Returns
// its number of broadcasts.
__device__ __forceinline__ int ladder_rung(const State& mine, const PlanParams& p, int T, int water,
                                           bool second_choice, int* scratch, int lane) {
  start_candidate(mine, true, lane);
  const int num = place(mine, p, T, water, true, lane, /*breadth_first=*/false,
                        /*finest_only=*/true, second_choice);
  level_quotas(mine, num, lane);
  return finish_candidate(mine, num, T, finish_level(T), p.min_move, scratch, lane,
                          [] { return false; });
}

// The sequential form's ladder (warp 0, every lane): the rungs one after the other in block 1,
// then the upper rungs' second-choice form, each copied over block 0 when strictly better. Returns
// the kept plan's number of broadcasts. Out of line, State and PlanParams by value (as
// finish_sequential).
inline __device__ __noinline__ int finest_ladder(const State st, const PlanParams p, int T,
                                                 int num_kept, int lane) {
  const LadderStart l = ladder_start(st, T, num_kept, lane);
  if (!l.run) return num_kept;
  unsigned long long cost_kept = l.cost_kept;
  State challenger = st;
  challenger.use_buffer(1);
#pragma unroll 1
  for (int k = 0; k < kIserFinestLadderSteps + kIserSecondChoiceRungs; ++k) {
    if (k == kIserFinestLadderSteps && static_cast<int>(cost_kept >> 32) <= l.second_choice_gate(T))
      break;
    // NOTE: PlanSmem::finish_scratch_words (pair_head .. pair_items) >= 6 max_broadcasts + 5 P,
    // what level_chains and top_up_exports take (checked on the host).
    // k >= kIserFinestLadderSteps: the second-choice form of the upper rungs.
    const bool second_choice = k >= kIserFinestLadderSteps;
    const int j = second_choice ? k - kIserSecondChoiceRungs : k;
    const int num = ladder_rung(challenger, p, T, l.water(j), second_choice, st.pair_head, lane);
    const unsigned long long cost = candidate_cost(challenger, num, lane);
    if (cost < cost_kept) {  // ties: the kept plan
      cost_kept = cost;
      num_kept = num;
      keep_block_1(st, lane);
    }
  }
  return num_kept;
}

// The parallel form's ladder, by warp w = 1 .. kIserFinestLadderSteps (every lane), after a block
// barrier that follows the finish: rung w − 1 (second_choice: its second-choice form) in block w,
// scratch block w + kIserFinestLadderSteps (the last rung: the stage-4 pair lists); its cost (the
// largest key when the ladder does not run) and size to iser_candidates. `l`: the LadderStart of
// the plan before the ladder, the same on every ladder warp and for both forms of the rungs (the
// CPU fixes the water levels before the first rung). Out of line, State and PlanParams by value.
static_assert(2 * kIserFinestLadderSteps <= kIserParallelBlocks,
              "the ladder's rungs and all but one of their scratch areas fit the candidate blocks");
inline __device__ __noinline__ void ladder_rung_warp(const State st, const PlanParams p, int T,
                                                     const LadderStart l, bool second_choice,
                                                     int warp, int lane) {
  unsigned long long cost = ~0ull;
  int num = 0;
  // The second-choice form runs the upper kIserSecondChoiceRungs rungs only.
  if (l.run && (!second_choice || warp > kIserFinestLadderSteps - kIserSecondChoiceRungs)) {
    State mine = st;
    mine.use_buffer(warp);
    int* scratch = warp < kIserFinestLadderSteps
                       ? candidate_block(st, warp + kIserFinestLadderSteps)
                       : st.pair_head;
    num = ladder_rung(mine, p, T, l.water(warp - 1), second_choice, scratch, lane);
    cost = candidate_cost(mine, num, lane);
  }
  if (lane == 0) {
    iser_candidates.cost[warp] = cost;
    iser_candidates.num[warp] = num;
  }
}

// The sequential form (warp 0, every lane), called only when the kept placement ends above
// finish_level. Returns the kept plan's number of broadcasts. Out of line, State and PlanParams
// by value (as place_iser_sequential).
inline __device__ __noinline__ int finish_sequential(const State st, const PlanParams p, int T,
                                                     int num_placed, int lane) {
  const int stop_at = finish_level(T);
  const auto never = [] { return false; };
  int num_kept =
      finish_candidate(st, num_placed, T, stop_at, p.min_move, candidate_block(st, 1), lane, never);
  unsigned long long cost_kept = candidate_cost(st, num_kept, lane);
  State challenger = st;
  challenger.use_buffer(1);
#pragma unroll 1
  for (int k = kIserPlacedCandidates; k < kIserParallelBlocks; ++k) {
    if (static_cast<int>(cost_kept >> 32) <= stop_at) break;
    start_candidate(challenger, true, lane);
    int num = place(challenger, p, T, candidate_water(k, T), true, lane, /*breadth_first=*/true);
    level_quotas(challenger, num, lane);
    // NOTE: PlanSmem::finish_scratch_words (pair_head .. pair_items) >= 6 max_broadcasts + 5 P,
    // what level_chains and top_up_exports take (checked on the host).
    num = finish_candidate(challenger, num, T, stop_at, p.min_move, st.pair_head, lane, never);
    const unsigned long long cost = candidate_cost(challenger, num, lane);
    if (cost < cost_kept) {  // ties: the kept plan
      cost_kept = cost;
      num_kept = num;
      keep_block_1(st, lane);
    }
  }
  // The finest ladder (its rungs in block 1, the pair lists as scratch).
  return finest_ladder(st, p, T, num_kept, lane);
}

// The parallel form, step A (warp 0 and the breadth-first warps, every lane): warp 0 finishes
// the kept plan, warp k finishes breadth-first candidate k (leveled in step 2); each stores its
// cost and number of broadcasts in iser_candidates. Out of line, State and PlanParams by value.
inline __device__ __noinline__ void finish_candidate_warp(const State st, const PlanParams p, int T,
                                                          int num_kept, int warp, int lane) {
  State mine = st;
  mine.use_buffer(warp);
  // Scratch: block 1 for the kept plan, blocks 2, 3 for the breadth-first ones.
  int* scratch = candidate_block(st, warp == 0 ? 1 : warp - kIserPlacedCandidates + 2);
  const int n0 = warp == 0 ? num_kept : iser_candidates.num[warp];
  // NOTE: discard_from only falls, and only to a candidate whose result the CPU's comparisons
  // skip (see below), so a stale read merely finishes a candidate in vain: the plan is the same
  // whatever the timing. Lane 0 reads it (atomically: another warp writes it) for the warp.
  const auto discarded = [warp, lane] {
    int from = 0;
    if (lane == 0) from = atomicAdd(&iser_candidates.discard_from, 0);
    return warp != 0 && __shfl_sync(PlanConfig::kFullMask, from, 0) <= warp;
  };
  const int stop_at = finish_level(T);
  const int n = finish_candidate(mine, n0, T, stop_at, p.min_move, scratch, lane, discarded);
  const unsigned long long cost = candidate_cost(mine, n, lane);
  __syncwarp();  // every lane has read num[warp] before lane 0 rewrites it
  if (lane == 0) {
    iser_candidates.cost[warp] = cost;
    iser_candidates.num[warp] = n;
    // Ended at or below stop_at: the CPU compares no breadth-first candidate after this one (the
    // kept plan: none; breadth-first candidate k, which then wins: none after k).
    if (static_cast<int>(cost >> 32) <= stop_at) {
      atomicMin(&iser_candidates.discard_from, warp == 0 ? kIserPlacedCandidates : warp + 1);
    }
  }
}

// The parallel form's finish, by every thread of the CTA (CTA-uniform arguments) after a block
// barrier that follows keep_best_candidate; `max_load`: the kept placement's. Leaves the kept
// plan in block 0 (a block barrier must follow before its arrays are read) and returns its
// number of broadcasts.
__device__ __forceinline__ int finish_parallel(const State& st, const PlanParams& p, int T,
                                               int num_kept, int max_load, int warp, int lane,
                                               int tid) {
  const int stop_at = finish_level(T);
  if (max_load <= stop_at) return num_kept;  // nothing changes the plan
  if (warp == 0 || (warp >= kIserPlacedCandidates && warp < kIserParallelBlocks)) {
    finish_candidate_warp(st, p, T, num_kept, warp, lane);
  }
  __syncthreads();
  // The CPU's comparisons: each breadth-first candidate only while the best so far ends above
  // stop_at, kept only when strictly better.
  int kept = 0;
  unsigned long long cost_kept = iser_candidates.cost[0];
#pragma unroll 1
  for (int k = kIserPlacedCandidates; k < kIserParallelBlocks; ++k) {
    const unsigned long long cost = iser_candidates.cost[k];
    if (static_cast<int>(cost_kept >> 32) > stop_at && cost < cost_kept) {
      kept = k;
      cost_kept = cost;
    }
  }
  if (kept != 0) copy_block_to_0(st, kept, tid, PlanConfig::kThreads);
  int num = iser_candidates.num[kept];
  // The finest ladder: its rungs at once on warps 1 .. kIserFinestLadderSteps, then the CPU's
  // comparisons in rung order (a rung is kept only when strictly better); then the same for the
  // upper rungs' second-choice form, in their blocks again (the winner so far sits in block 0).
  __syncthreads();  // block 0 holds the finished plan; every thread has read num
  const bool ladder_warp = warp >= 1 && warp <= kIserFinestLadderSteps;
  LadderStart l;
  if (ladder_warp) l = ladder_start(st, T, num, lane);
  if (warp == 1 && lane == 0) iser_candidates.second_choice_gate = l.second_choice_gate(T);
#pragma unroll 1
  for (int form = 0; form < 2; ++form) {
    // The second-choice rungs only while the best so far ends above the gate (every thread
    // reads it after the first form's barriers).
    if (form == 1 && static_cast<int>(cost_kept >> 32) <= iser_candidates.second_choice_gate) break;
    if (ladder_warp) ladder_rung_warp(st, p, T, l, /*second_choice=*/form == 1, warp, lane);
    __syncthreads();
    int rung = 0;
#pragma unroll 1
    for (int w = 1; w <= kIserFinestLadderSteps; ++w) {
      const unsigned long long cost = iser_candidates.cost[w];
      if (cost < cost_kept) {
        rung = w;
        cost_kept = cost;
      }
    }
    if (rung != 0) {
      copy_block_to_0(st, rung, tid, PlanConfig::kThreads);
      num = iser_candidates.num[rung];
    }
    // Block 0 and num are final for this form; every thread has read the costs before the
    // ladder warps write the next form's (and the rung's block is free again).
    __syncthreads();
  }
  return num;
}

}  // namespace iser::cuda::plan_detail
