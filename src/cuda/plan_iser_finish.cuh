// The finish of the `iser` policy's plan on the GPU (warp 0, after the candidate comparison),
// bit-exact with the end of plan_iser of the CPU (src/core/planner/iser.cpp; docs/design.md §5):
// the kept placement (block 0) is leveled along chains of hosts, topped up and, when top-up added
// a broadcast, leveled along chains again; then, while it still ends above stop_at, the two
// breadth-first candidates (water level T, then T + T/kIserSlackDivisorCoarsest) are placed in
// block 1, leveled, finished the same way and copied over block 0 when strictly better (lower max
// load; ties: fewer remote copies). Chains and top-up keep their scratch in the block after the
// one they finish, so a finish in block 1 needs a third candidate block (PlanParams::iser_blocks
// >= 3, both forms).
#pragma once

#include "cuda/plan_iser.cuh"
#include "cuda/plan_iser_chains.cuh"
#include "cuda/plan_iser_top_up.cuh"
#include "cuda/plan_place.cuh"
#include "iser/planner.h"

namespace iser::cuda::plan_detail {

static_assert(kIserSequentialBlocks >= 3 && kIserParallelBlocks >= kIserSequentialBlocks,
              "both forms hold the kept plan, a challenger and its finish's scratch");

// One candidate's finish in st's block (warp 0, every lane): chains, top-up exports and, when
// they added a broadcast, chains again, each only while the max load is above stop_at (below it
// neither changes the plan). Returns the new number of broadcasts.
__device__ __forceinline__ int finish_candidate(const State& st, int num_broadcasts, int T,
                                                int stop_at, int min_move, int lane) {
  int max_load = 0;
#pragma unroll 1
  for (int r = lane; r < st.P; r += 32) max_load = max(max_load, st.load[r]);
  if (__reduce_max_sync(PlanConfig::kFullMask, max_load) <= stop_at) return num_broadcasts;
  level_chains(st, num_broadcasts, stop_at, lane);
  const int topped = top_up_exports(st, num_broadcasts, T, stop_at, min_move, lane);
  if (topped > num_broadcasts) level_chains(st, topped, stop_at, lane);
  return topped;
}

// The kept placement's finish and the breadth-first candidates (warp 0, every lane); called only
// when the kept placement ends above stop_at. Returns the kept plan's number of broadcasts.
// Out of line, State and PlanParams by value (as place_iser_sequential).
inline __device__ __noinline__ int finish_iser(const State st, const PlanParams p, int T,
                                               int num_placed, int lane) {
  const int stop_at = T + T / kIserSlackDivisorFinest;
  int num_kept = finish_candidate(st, num_placed, T, stop_at, p.min_move, lane);
  unsigned long long cost_kept = candidate_cost(st, num_kept, lane);
  State challenger = st;
  challenger.use_buffer(1);
#pragma unroll 1
  for (int i = 0; i < 2; ++i) {
    if (static_cast<int>(cost_kept >> 32) <= stop_at) break;
    const int water = i == 0 ? T : T + T / kIserSlackDivisorCoarsest;
    start_candidate(challenger, true, lane);
    int num = place(challenger, p, T, water, true, lane, /*breadth_first=*/true);
    level_quotas(challenger, num, lane);
    num = finish_candidate(challenger, num, T, stop_at, p.min_move, lane);
    const unsigned long long cost = candidate_cost(challenger, num, lane);
    if (cost < cost_kept) {  // ties: the kept plan
      cost_kept = cost;
      num_kept = num;
      keep_block_1(st, lane);
    }
  }
  return num_kept;
}

}  // namespace iser::cuda::plan_detail
