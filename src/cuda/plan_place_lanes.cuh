// Stage 2 of the HALO-Q planner kernel for P <= 32 (EP5..EP32; EP4 takes plan_place_thread.cuh):
// the placement of plan_place.cuh (docs/design.md §4.2) with one rank per lane, written for the
// length of a pass.
//
// NOTE: a pass is one dependent chain on one warp; its cost is the number of warp reductions and
// shuffles in sequence on it (tens of cycles each) plus its instruction count, since one warp
// hides no latency. This version:
//   - computes everything that does not depend on the owner beside the owner's reduction: the
//     room of every aligned group (a prefix over the ranks), the best group of each level (one
//     reduce-max per level) and each rank's place in the coldest-first fill of its finest group
//     (shuffles); after the owner only its candidate (two shuffles) and warp-uniform selects
//     remain (choose_level);
//   - has only warp-uniform branches in a pass (no owner left, a failed attempt, the fill order,
//     overflow); per-lane updates are selects and predicated stores (a divergent `if` costs a
//     reconvergence on the chain);
//   - keeps one `alive` flag per rank instead of (frozen, sent < S, cursor < C);
//   - loads every lane's next candidate and its mass while the owner is being chosen, so the
//     owner's cursor moves by selects (no divergent load).
// The decisions are those of place_ranks (same owner, group, quotas, ties, pass budget and
// overflow checks); the GpuPlanner tests compare both against the CPU planner.
#pragma once

#include "cuda/plan_place.cuh"
#include "cuda/plan_place_thread.cuh"

namespace iser::cuda::plan_detail {

// Levels of the lanes placement: (1 << num_levels) - 1 <= 32 groups.
inline constexpr int kLaneLevels = 5;
// Members of a finest-level group whose coldest-first fill is computed before the group is known.
inline constexpr int kLaneFillMembers = 8;

// Per-level constants of the lanes placement, fixed for the whole placement.
struct LaneLevels {
  int limit[kLaneLevels];  // warp-uniform: level l is wanted iff mass <= limit[l] (-1: none)
  int finest_begin;        // first rank of the lane's finest group
  int finest_size;

  __device__ __forceinline__ void make(int P, int num_levels, int T, int lane) {
#pragma unroll
    for (int l = 0; l < kLaneLevels; ++l) {
      limit[l] = l < num_levels ? wanted_mass_limit(P >> l, T) : -1;
    }
    finest_size = P >> (num_levels - 1);
    finest_begin = lane / finest_size * finest_size;
  }
};

// The group a lanes pass takes: HALO-Q's level walk (docs/design.md §4.2) over one key per level,
// room << 7 | tie of the level's candidate group (0: none eligible with room). Warp-uniform.
// Reference: the finest wanted level with room > 0. absorb: the finest wanted level whose room
// >= give, else the most room over the wanted levels (ties: the finer level).
__device__ __forceinline__ GroupChoice choose_level(const unsigned (&key)[kLaneLevels],
                                                    const LaneLevels& ll, bool absorb, int P,
                                                    int mass, int give) {
  int level = -1;
  unsigned chosen = 0;
  int fallback_level = -1;
  unsigned fallback = 0;
#pragma unroll
  for (int l = 0; l < kLaneLevels; ++l) {  // coarse to fine: a finer level overrides
    const unsigned room = key[l] >> 7;
    const bool wanted = mass != 0 && give > 0 && mass <= ll.limit[l] && room > 0;
    const bool takes = wanted && (!absorb || room >= static_cast<unsigned>(give));
    level = takes ? l : level;
    chosen = takes ? key[l] : chosen;
    const bool more = wanted && room >= (fallback >> 7);
    fallback_level = more ? l : fallback_level;
    fallback = more ? key[l] : fallback;
  }
  if (absorb && level < 0) {
    level = fallback_level;
    chosen = fallback;
  }
  GroupChoice choice;
  if (level < 0) return choice;
  const unsigned room = chosen >> 7;
  choice.level = level;
  choice.begin = (127 - static_cast<int>(chosen & 127u)) * (P >> level);
  choice.moved = static_cast<int>(min(room, static_cast<unsigned>(give)));
  choice.full = static_cast<unsigned>(give) >= room;
  return choice;
}

// HALO-Q placement (reference and the absorb / owner_in_group / min_move variants) for P <= 32
// whose aligned groups fit one warp ((1 << num_levels) - 1 <= 32). Warp 0; returns the number of
// broadcasts and leaves the final loads in st.load. Lane r holds rank r.
//
// NOTE: a pass is one dependent chain on one warp, and every warp reduction or shuffle on it costs
// tens of cycles. Everything that does not depend on the owner is computed beside the owner's
// reduction: the room of every aligned group (one group per lane, LaneGroup, from a prefix over
// the ranks: the owner adds no room since its load is above the water), each level's best group
// (one full-warp reduce-max per level) and every rank's place in the coldest-first fill of its
// finest group (shuffles from the group's lanes). After the owner: its candidate (two shuffles)
// and warp-uniform selects. Only a fill at a coarser level goes through shared memory. The only
// branches of a pass are warp-uniform; per-lane updates are selects and predicated stores.
// Every warp operation takes the full mask: reductions over a group's lanes alone (a partial
// mask per group) gave the same plans but made a pass about twenty times slower on H200.
// kSteps >= ceil(log2 P) is the room scan's depth, a constant so that the pass loop holds no
// test of it (steps past P add nothing to the lanes below P).
template <int kSteps>
__device__ __forceinline__ int place_lanes(const State& st, const PlanParams& p, int T, int lane) {
  const int P = st.P;
  const int S = st.S;
  const int C = st.C;
  const int water = T;
  const int min_move = p.min_move;
  const bool absorb = p.absorb;
  const bool owner_in_group = p.owner_in_group;
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
  LaneLevels ll;
  ll.make(P, st.num_levels, water, lane);
  const int finest = st.num_levels - 1;
  const bool fill_in_registers = ll.finest_size <= kLaneFillMembers;
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
    // Room of the lane's group (LaneGroup: lane = 2^level - 1 + group; independent of the
    // owner, so beside its reduction): inclusive prefix of (room << 7 | no free helper slot) over
    // ranks, at the group's ends. key: room << 7 | 127 - group, 0 without room.
    const bool cold = is_rank && load < water;
    const unsigned packed[1] = {warp_inclusive_scan(
        (cold ? static_cast<unsigned>(water - load) << 7 : 0u) | (is_rank && recv >= S ? 1u : 0u),
        lane, 1 << kSteps)};
    const unsigned room = lg.room<1>(packed);
    const unsigned group_key = room > 0 ? room << 7 | (lg.tag & 127u) : 0u;
    const unsigned group_level = lg.tag >> 7;
    unsigned best[kLaneLevels];  // each level's best group
#pragma unroll
    for (int l = 0; l < kLaneLevels; ++l) {
      best[l] = __reduce_max_sync(PlanConfig::kFullMask,
                                  group_level == static_cast<unsigned>(l) ? group_key : 0u);
    }
    // The coldest-first fill inside the lane's finest group: the caps of the members colder than
    // the lane by (L, rank). The owner's cap is 0 without a test: its L is above the water.
    const unsigned order = static_cast<unsigned>(load) << 7 | static_cast<unsigned>(lane);
    int before_finest = 0;
#pragma unroll
    for (int j = 0; j < kLaneFillMembers; ++j) {
      const unsigned word = __shfl_sync(PlanConfig::kFullMask, order, ll.finest_begin + j);
      const int load2 = static_cast<int>(word >> 7);
      before_finest += j < ll.finest_size && word < order && load2 < water ? water - load2 : 0;
    }
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
    if (owner_in_group) {  // the owner's own group at each level
#pragma unroll
      for (int l = 0; l < kLaneLevels; ++l) {
        const int group_lane = (1 << l) - 1 + o / max(1, P >> l);
        best[l] = __shfl_sync(PlanConfig::kFullMask, group_key, group_lane);
      }
    }
    const GroupChoice g = choose_level(best, ll, absorb, P, mass_o, give);
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
    if (!g.full && level == finest && fill_in_registers) {
      take = min(cap, max(0, give - before_finest));
    } else if (!g.full) {
      // A coarser group: the members' words through shared memory, four per 16-byte load (an
      // aligned group of four or more starts at a multiple of 4).
      __syncwarp();  // the previous fill's reads are done
      fill_words[lane] = order;
      __syncwarp();
      int before = 0;
#pragma unroll 1
      for (int j = begin & ~3; j < begin + size; j += 4) {
        const uint4 w = *reinterpret_cast<const uint4*>(fill_words + j);
        const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int m = j + i;
          const int load2 = static_cast<int>(words[i] >> 7);
          before += m >= begin && m < begin + size && words[i] < order && load2 < water
                        ? water - load2
                        : 0;
        }
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
// (place_thread), one rank per lane where the aligned groups fit a warp (every P <= 32 at the
// default g_min), place_ranks otherwise.
//
// NOTE: two inlined copies of the lane loop (scan depths 3 and 5), not one per depth: after an L2
// flush the kernel's code comes from HBM, so every copy between stage 1 and the repair set-up
// costs its first fetch, and an out-of-line call costs its arguments' trip through the stack.
// place_thread is used at P = 4 only: at P = 8 it executes about twice the instructions per pass
// and lost to the lanes.
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
