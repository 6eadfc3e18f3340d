// The `iser` policy's placement on the GPU, bit-exact with plan_iser of the CPU
// (src/core/planner/iser.cpp) without a previous plan: up to six candidate placements, the best
// kept (lowest max load; ties: fewer remote copies, then the earlier candidate):
//   1. room-aware placement at water level T,
//   2. HALO-Q's placement (absorb and owner_in_group off),
//   3. for d = 256, 128, 64, 32 in turn (kIserSlackDivisorFinest ... Coarsest), only when the best
//      so far ends above T + T/d: room-aware placement at water level T + T/d.
// Candidates live in two blocks of the shared arrays (PlanSmem::buffer_words apart): the kept
// one (block 0, where the later stages read the plan) and the challenger (block 1, copied over
// block 0 when it wins).
//
// Both kinds of placement are plan_detail::place (plan_place.cuh). All of it runs on warp 0.
#pragma once

#include "cuda/plan_place.cuh"
#include "iser/planner.h"

namespace iser::cuda::plan_detail {

// Fresh per-expert state of one candidate placement in st's block (warp 0); the per-rank state
// starts from the home loads in registers (place_ranks).
inline __device__ void start_candidate(const State& st, bool room_aware, int lane) {
  __syncwarp();
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

// Copies candidate block 1 over block 0 (warp 0): blocks are 16-byte aligned, whole int4s.
__device__ __forceinline__ void keep_block_1(const State& st, int lane) {
  __syncwarp();
  int4* to = reinterpret_cast<int4*>(st.load);
  const int4* from = reinterpret_cast<const int4*>(st.load + st.buffer_words);
#pragma unroll 1
  for (int i = lane; i < st.buffer_words / 4; i += 32) to[i] = from[i];
  __syncwarp();
}

// plan_iser's placement (warp 0): leaves the kept candidate in st's own block (block 0; the
// challenger is planned in block 1 and copied over when it wins) and returns its number of
// broadcasts. Out of line: its code and second State view stay out of the HALO-Q path. State
// and PlanParams go by value (see trade() in plan_repair.cuh: by reference, every thread would
// store them to local memory at kernel start).
inline __device__ __noinline__ int place_iser(const State st, const PlanParams p, int T, int lane) {
  State challenger = st;
  challenger.use_buffer(1);
  start_candidate(st, true, lane);
  int num_kept = place(st, p, T, T, true, lane);
  unsigned long long cost_kept = candidate_cost(st, num_kept, lane);
  // A challenger replaces the kept one only when strictly better (ties: the earlier candidate).
  auto challenge = [&](int num) {
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

}  // namespace iser::cuda::plan_detail
