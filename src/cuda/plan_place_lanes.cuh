// Stage 2 of the HALO-Q planner kernel for P <= 32 (EP4..EP32):
// the placement of plan_place.cuh (docs/design.md §4.2) with one rank per lane and one aligned
// group per lane, written for the length of a pass.
//
// NOTE: a pass is one dependent chain on one warp. ncu on H200 counted 283-291 warp
// instructions per pass of the general place_ranks<1> at EP8-32, 0.85 us per broadcast, half of
// its stall samples "wait" (fixed-latency dependencies) spread over the whole pass, and a quarter
// of its instructions control flow: reconvergence (BSSY/BSYNC) around every per-lane `if`, the
// short-circuit tests of the group search. This version:
//   - has only warp-uniform branches in a pass (no owner left, a failed attempt, the fill order,
//     overflow); per-lane updates are selects and predicated stores;
//   - keeps one `alive` flag per rank instead of (frozen, sent < S, cursor < C);
//   - loads every lane's next candidate and its mass while the owner is being chosen, so the
//     owner's cursor moves by selects (no divergent load);
//   - tests the group's acceptance without short-circuit branches, in one reduction
//     (choose_group_lane, which place_ranks shares);
//   - reads the members' words (L << 7 | rank) for the coldest-first fill from shared memory,
//     four per 16-byte load (a member's cap and order follow from its word).
// NOTE: the pass is bound by the instructions it executes more than by its chain of warp
// operations: computing every level's best group (one reduce-max per level) and each rank's fill
// position (shuffles) beside the owner's reduction, so that only selects followed it, made the
// placement 10-20% slower at EP8-32 (same plans). Reductions over each group's lanes with a
// partial mask per group (instead of the prefix) gave the same plans and passes about twenty
// times slower.
// The decisions are those of place_ranks (same owner, group, quotas, ties, pass budget and
// overflow checks); the GpuPlanner tests compare both against the CPU planner.
#pragma once

#include "cuda/plan_place.cuh"
#include "cuda/plan_place_thread.cuh"

namespace iser::cuda::plan_detail {

// HALO-Q placement (reference and the absorb / owner_in_group / min_move variants) for P <= 32
// whose aligned groups fit one warp ((1 << num_levels) - 1 <= 32). Warp 0; returns the number of
// broadcasts and leaves the final loads in st.load. Lane r holds rank r and group r (flat index
// 2^level - 1 + group, LaneGroup); kSteps >= ceil(log2 P) is the room scan's depth, a constant
// so that the pass loop holds no test of it (steps past P add nothing to the lanes below P).
//
// NOTE: the only branches of a pass are warp-uniform (no owner left, a failed attempt, the fill
// order, overflow). Per-lane updates are selects and predicated stores: a divergent `if` costs a
// reconvergence barrier on the chain.
template <int kSteps>
__device__ __forceinline__ int place_lanes(const State& st, const PlanParams& p, int T, int lane) {
  const int P = st.P;
  const int S = st.S;
  const int C = st.C;
  const int water = T;
  const int min_move = p.min_move;
  const bool is_rank = lane < P;
  // A lane's own candidate list (lanes >= P read rank 0's, never used).
  const int32_t* const candidates = st.candidates + (is_rank ? lane : 0) * C;
  int load = is_rank ? st.home_load[lane] : 0;
  int recv = 0;
  int sent = 0;
  int cursor = 0;
  int cand = is_rank && C > 0 ? candidates[0] : -1;
  int mass = cand >= 0 ? st.hist[cand] : 0;
  // NOTE: alive == !frozen && sent < S && cursor < C of place_ranks (see its NOTE: a rank that
  // would be frozen at once is left out of the owner choice).
  bool alive = is_rank && C > 0 && S > 0;
  LaneGroup lg;
  lg.make(st, water, lane);
  const bool packed_key = static_cast<long long>(P) * water < (1 << 22);
  int num_broadcasts = 0;
  int quota_used = 0;
  const int max_passes = P * (C + 2);
  alignas(16) __shared__ unsigned fill_words[32];  // the coldest-first fill's (L << 7 | rank)
#pragma unroll 1
  for (int pass = 0; pass < max_passes; ++pass) {
    // Owner: the live rank with the largest L above the water, ties to the lowest rank.
    const unsigned mine =
        alive && load > water ? static_cast<unsigned>(load) << 7 | (127u - lane) : 0u;
    const unsigned key = __reduce_max_sync(PlanConfig::kFullMask, mine);
    // Room of the lane's group (independent of the owner, so beside the reduction): inclusive
    // prefix of (room << 7 | no free helper slot) over ranks, at the group's ends.
    const bool cold = is_rank && load < water;
    const unsigned packed[1] = {warp_inclusive_scan(
        (cold ? static_cast<unsigned>(water - load) << 7 : 0u) | (is_rank && recv >= S ? 1u : 0u),
        lane, 1 << kSteps)};
    const unsigned room = lg.room<1>(packed);
    // The lane's next candidate (used if it is the owner), loaded before it is known.
    const int next = cursor + 1;
    const int next_cand = next < C ? candidates[next] : -1;
    const int next_mass = next_cand >= 0 ? st.hist[next_cand] : 0;
    if (key == 0) break;
    const int o = 127 - static_cast<int>(key & 127u);
    const int load_o = static_cast<int>(key >> 7);
    const bool is_owner = lane == o;
    const int expert = __shfl_sync(PlanConfig::kFullMask, cand, o);
    const int mass_o = __shfl_sync(PlanConfig::kFullMask, mass, o);
    // The cursor advances even if this attempt fails.
    cursor = is_owner ? next : cursor;
    cand = is_owner ? next_cand : cand;
    mass = is_owner ? next_mass : mass;
    alive = alive && !(is_owner && next >= C);
    const int give = min(load_o - water, mass_o);

    const GroupChoice g = choose_group_lane(p, lg, room, packed_key, P, o, mass_o, give);
    const int moved = g.moved;
    if (g.level < 0 || moved <= 0) {  // freeze the owner
      alive = alive && !is_owner;
      continue;
    }
    if (moved < min_move) continue;  // HALO-Q variant: skipped, not frozen (cursor advanced)

    // Quotas: members other than the owner, coldest first by (L, rank) before this step, each
    // take min(water - L, what is left of give); with give >= room every member takes its cap.
    const int level = g.level;
    const int size = P >> level;
    const int begin = g.begin;
    const bool in_group = lane >= begin && lane < begin + size;
    const int cap = in_group && !is_owner && load < water ? water - load : 0;
    int take = cap;
    if (!g.full) {
      // Member m's cap follows from its word (L << 7 | m): water - L if L < water.
      // NOTE: the owner's cap is 0 without a test: its L is above the water (the owner choice).
      // The words go through shared memory, four members per 16-byte load (an aligned group of
      // four or more starts at a multiple of 4), not a dependent shuffle per member.
      const unsigned order = static_cast<unsigned>(load) << 7 | static_cast<unsigned>(lane);
      __syncwarp();  // the previous fill's reads are done
      fill_words[lane] = order;
      __syncwarp();
      auto cap_before = [&](unsigned word, int m) {
        const int load2 = static_cast<int>(word >> 7);
        return m >= begin && m < begin + size && word < order && load2 < water ? water - load2 : 0;
      };
      int before = 0;
      auto add_four = [&](int j) {
        const uint4 w = *reinterpret_cast<const uint4*>(fill_words + j);
        before += (cap_before(w.x, j) + cap_before(w.y, j + 1)) +
                  (cap_before(w.z, j + 2) + cap_before(w.w, j + 3));
      };
      if constexpr (kSteps <= 3) {  // P <= 8: both loads, no loop
#pragma unroll
        for (int j = 0; j < 1 << kSteps; j += 4) add_four(j);
      } else {
#pragma unroll 2
        for (int j = begin & ~3; j < begin + size; j += 4) add_four(j);
      }
      take = min(cap, max(0, give - before));
    }
    const bool owner_in = o >= begin && o < begin + size;
    const int entries = size + (owner_in ? 0 : 1);
    if (plan_overflows(st, num_broadcasts, quota_used, entries, lane)) break;
    // Commit: every member (the owner too) receives a helper slot; the owner exports `moved`.
    const int owner_quota = mass_o - moved;
    if (in_group) st.quota[quota_used + lane - begin] = is_owner ? owner_quota : take;
    if (is_owner && !owner_in) st.quota[quota_used + size] = owner_quota;
    recv += in_group ? 1 : 0;
    load += take - (is_owner ? moved : 0);
    sent += is_owner ? 1 : 0;
    alive = alive && !(is_owner && sent >= S);
    if (lane == 0) store_broadcast(st, num_broadcasts, expert, o, level, begin, size, quota_used);
    ++num_broadcasts;
    quota_used += entries;
  }
  if (is_rank) st.load[lane] = load;
  __syncwarp();
  return num_broadcasts;
}

// HALO-Q placement (warp 0): on lane 0 with every rank in its registers for P = 4
// (place_thread), one rank and one group per lane where they fit a warp (every P <= 32 at the
// default g_min), place_ranks otherwise.
//
// NOTE: two copies of the lane loop, not one per scan depth: after an L2 flush the kernel's code
// comes from HBM, and five inlined copies between stage 1 and the repair set-up cost the set-up
// +0.55 us (EP8-32), more than a fifth scan step costs EP16 (+0.13 us); an out-of-line call cost
// +0.95 us (its arguments go through the stack). Measured on H200.
// NOTE: place_thread<8> was slower than place_lanes<3> at EP8 (placement 4.77 against 4.03 us:
// ~670 instructions per pass, twice the count of P = 4) and is not used; place_thread<4> took
// EP4's placement from 1.60 to 1.22-1.25 us (H200).
__device__ __forceinline__ int place_halo_q(const State& st, const PlanParams& p, int T, int lane) {
  if (thread_placement_fits(st)) {
    int num_broadcasts = 0;
    if (lane == 0) num_broadcasts = place_thread<kThreadPlaceRanks>(st, p, T);
    return __shfl_sync(PlanConfig::kFullMask, num_broadcasts, 0);
  }
  if (st.P <= 32 && (1 << st.num_levels) - 1 <= 32) {
    return st.P <= 8 ? place_lanes<3>(st, p, T, lane) : place_lanes<5>(st, p, T, lane);
  }
  return st.P <= 32 ? place_ranks<1>(st, p, T, T, false, lane)
                    : place_ranks<PlanConfig::kRankChunks>(st, p, T, T, false, lane);
}

}  // namespace iser::cuda::plan_detail
