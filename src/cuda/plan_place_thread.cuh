// Stage 2 of the HALO-Q planner kernel for P = 4 (EP4, where the planner is shortest): the
// placement of plan_place.cuh (docs/design.md §4.2) on one thread, every rank's state in registers.
//
// NOTE: a placement pass is one dependent chain. On a warp (plan_place_lanes.cuh) every choice is
// a reduction or a shuffle, 36-52 cycles each on H200, and an EP4 pass took ~1,100 cycles. One
// thread holding every rank needs none: the owner is a max over registers (a tree of integer max
// steps), the owner's fields are picked by the bits of its index, the group rooms are sums over
// registers and the coldest-first fill compares every pair of members. The price is instructions:
// ~310 per pass at P = 4 (about 2.5 cycles each), ~670 at P = 8, where it lost to the lanes
// (H200: EP8 placement 4.77 against 4.03 us; EP4 1.60 -> 1.22-1.25 us). So P = 4 only.
// The decisions are those of place_lanes / place_ranks (same owner, group, quotas, ties, pass
// budget and overflow checks); the GpuPlanner tests compare all of them against the CPU planner.
#pragma once

#include "cuda/plan_place.cuh"

namespace iser::cuda::plan_detail {

// The ranks of the plans place_thread takes (the register arrays below are indexed by
// compile-time rank numbers, and every one of them is a rank).
inline constexpr int kThreadPlaceRanks = 4;

// Whether place_thread takes the plan: P = kThreadPlaceRanks with at most two levels (level 1,
// when g_min makes it exist, is the two halves).
__device__ __forceinline__ bool thread_placement_fits(const State& st) {
  return st.P == kThreadPlaceRanks && st.num_levels <= 2;
}

// A balanced tree over v (R a power of two): log2(R) steps deep where a chain would be R - 1.
// Step `depth` (0 first) combines neighbours x, y into op(x, y, depth).
template <int R, typename T, typename Op>
__device__ __forceinline__ T tree_reduce(const T (&v)[R], Op op, int depth = 0) {
  static_assert(R >= 1 && (R & (R - 1)) == 0);
  if constexpr (R == 1) {
    return v[0];
  } else {
    T half[R / 2];
#pragma unroll
    for (int i = 0; i < R / 2; ++i) half[i] = op(v[2 * i], v[2 * i + 1], depth);
    return tree_reduce<R / 2>(half, op, depth + 1);
  }
}

// v[o] for a runtime o < R: selects on o's bits, so the register array is never indexed at run
// time (no local memory).
template <int R, typename T>
__device__ __forceinline__ T pick(const T (&v)[R], int o) {
  return tree_reduce<R>(v, [o](T x, T y, int depth) { return ((o >> depth) & 1) != 0 ? y : x; });
}

// The coldest-first fill on one thread: take[r] (each member's cap, 0 for the others) becomes
// min(cap, what is left of give after the members colder by (L, rank)).
template <int P>
__device__ __forceinline__ void fill_coldest_first(const int (&load)[P], int give, int (&take)[P]) {
  unsigned order[P];
#pragma unroll
  for (int r = 0; r < P; ++r) order[r] = static_cast<unsigned>(load[r]) << 3 | r;
  int fill[P];
#pragma unroll
  for (int r = 0; r < P; ++r) {
    int before = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) before += j != r && order[j] < order[r] ? take[j] : 0;
    fill[r] = min(take[r], max(0, give - before));
  }
#pragma unroll
  for (int r = 0; r < P; ++r) take[r] = fill[r];
}

// HALO-Q placement (reference and the absorb / owner_in_group / min_move variants) on the
// calling thread, for thread_placement_fits plans. Returns the number of broadcasts and leaves
// the final loads in st.load. The groups: g0 = all P ranks (level 0) and, with two levels, g1 =
// [0, P/2) and g2 = [P/2, P) (level 1).
template <int P>
__device__ __forceinline__ int place_thread(const State& st, const PlanParams& p, int T) {
  // NOTE: owner keys and fill orders are (L << 3 | rank): ranks fit 3 bits, and L < 2^25 (the
  // total is checked in stage 1), so the keys fit 32 bits.
  static_assert(P <= 8, "owner keys keep the rank in 3 bits");
  const int S = st.S;
  const int C = st.C;
  const int water = T;
  const int half = P >> 1;
  const bool two_levels = st.num_levels == 2;
  const int limit0 = wanted_mass_limit(P, T);
  const int limit1 = two_levels ? wanted_mass_limit(half, T) : -1;

  // Per rank in registers: load, candidate under the cursor and its mass, and three counters
  // in one word (helper slots received, broadcasts sent, candidate cursor; each <= 16). Rank
  // sets as bit masks: live owners, the two halves (level 1, empty with one level).
  // NOTE: the kernel has 128 registers per thread (512 threads), so the state is packed: with
  // one register per counter and a predicate per flag, ptxas spilled elsewhere in the kernel
  // (measured with 8 ranks).
  constexpr int kSent = 8;
  constexpr int kCursor = 16;
  int load[P], cand[P], mass[P], counters[P];
  // NOTE: alive == !frozen && sent < S && cursor < C of place_ranks (see its NOTE).
  unsigned alive = C > 0 && S > 0 ? (1u << P) - 1 : 0u;
  const unsigned lo = two_levels ? (1u << half) - 1 : 0u;
  const unsigned hi = two_levels ? ((1u << P) - 1) & ~lo : 0u;
#pragma unroll
  for (int r = 0; r < P; ++r) {
    load[r] = st.home_load[r];
    counters[r] = 0;
    cand[r] = C > 0 ? st.candidates[r * C] : -1;
    mass[r] = cand[r] >= 0 ? st.hist[cand[r]] : 0;
  }
  auto has = [](unsigned set, int r) { return ((set >> r) & 1u) != 0; };
  int num_broadcasts = 0;
  int quota_used = 0;
  const int max_passes = P * (C + 2);
#pragma unroll 1
  for (int pass = 0; pass < max_passes; ++pass) {
    // Owner: the live rank with the largest L above the water, ties to the lowest rank.
    unsigned keys[P];
#pragma unroll
    for (int r = 0; r < P; ++r) {
      keys[r] = has(alive, r) && load[r] > water
                    ? static_cast<unsigned>(load[r]) << 3 | static_cast<unsigned>(P - 1 - r)
                    : 0u;
    }
    // Rooms (independent of the owner: its load is above the water, so it adds no room), and
    // the ranks with no free helper slot.
    int cap[P];
    int cap_lo[P];
    unsigned full = 0;
#pragma unroll
    for (int r = 0; r < P; ++r) {
      cap[r] = load[r] < water ? water - load[r] : 0;
      cap_lo[r] = has(lo, r) ? cap[r] : 0;
      full |= (counters[r] & 0xff) >= S ? 1u << r : 0u;
    }
    const unsigned key =
        tree_reduce<P>(keys, [](unsigned x, unsigned y, int) { return max(x, y); });
    if (key == 0) break;
    const int o = P - 1 - static_cast<int>(key & 7u);
    const int load_o = static_cast<int>(key >> 3);
    const int expert = pick<P>(cand, o);
    const int mass_o = pick<P>(mass, o);
    // The owner's next candidate; the cursor advances even if this attempt fails. Loaded here,
    // used at the end of the pass (the group choice does not wait for it).
    const int next = (pick<P>(counters, o) >> kCursor) + 1;
    const int next_cand = next < C ? st.candidates[o * C + next] : -1;
    const int next_mass = next_cand >= 0 ? st.hist[next_cand] : 0;
    const int give = min(load_o - water, mass_o);

    const int sum_all = tree_reduce<P>(cap, [](int x, int y, int) { return x + y; });
    const int sum_lo = tree_reduce<P>(cap_lo, [](int x, int y, int) { return x + y; });
    const int room0 = full != 0 ? 0 : sum_all;
    const int room1 = (full & lo) != 0 ? 0 : sum_lo;
    const int room2 = (full & hi) != 0 ? 0 : sum_all - sum_lo;
    const bool base = mass_o != 0 && give > 0;
    const bool e0 = base && room0 > 0 && mass_o <= limit0;
    const bool e1 =
        base && two_levels && room1 > 0 && mass_o <= limit1 && (!p.owner_in_group || o < half);
    const bool e2 =
        base && two_levels && room2 > 0 && mass_o <= limit1 && (!p.owner_in_group || o >= half);
    const bool a0 = e0 && (!p.absorb || room0 >= give);
    const bool a1 = e1 && (!p.absorb || room1 >= give);
    const bool a2 = e2 && (!p.absorb || room2 >= give);
    // The finest level first, then the most room, then the lowest group; absorb with no group
    // taken at once: the most room over all levels, ties to the finer level, then the lower group.
    int group = a1 && (!a2 || room1 >= room2) ? 1 : a2 ? 2 : a0 ? 0 : -1;
    if (group < 0 && p.absorb) {
      int best = 0;
      group = e1 && room1 > best ? 1 : -1;
      best = group == 1 ? room1 : best;
      group = e2 && room2 > best ? 2 : group;
      best = group == 2 ? room2 : best;
      group = e0 && room0 > best ? 0 : group;
    }
    const int room = group == 1 ? room1 : group == 2 ? room2 : room0;
    const int moved = min(room, give);

#pragma unroll
    for (int r = 0; r < P; ++r) {
      const bool is_owner = r == o;
      counters[r] = is_owner ? (counters[r] & 0xffff) | next << kCursor : counters[r];
      cand[r] = is_owner ? next_cand : cand[r];
      mass[r] = is_owner ? next_mass : mass[r];
    }
    if (next >= C) alive &= ~(1u << o);
    if (group < 0 || moved <= 0) {  // freeze the owner
      alive &= ~(1u << o);
      continue;
    }
    if (moved < p.min_move) continue;  // HALO-Q variant: skipped, not frozen (cursor advanced)

    // Quotas: members other than the owner, coldest first by (L, rank) before this step, each
    // take min(water - L, what is left of give); with give >= room every member takes its cap.
    const int level = group == 0 ? 0 : 1;
    const int begin = group == 2 ? half : 0;
    const int size = group == 0 ? P : half;
    const unsigned members = group == 0 ? (1u << P) - 1 : group == 1 ? lo : hi;
    int take[P];
#pragma unroll
    for (int r = 0; r < P; ++r) take[r] = has(members, r) ? cap[r] : 0;  // the owner's cap is 0
    if (give < room) fill_coldest_first<P>(load, give, take);
    const bool owner_in = has(members, o);
    const int entries = size + (owner_in ? 0 : 1);
    if (plan_overflows(st, num_broadcasts, quota_used, entries, 0)) break;
    // Commit: every member (the owner too) receives a helper slot; the owner exports `moved`.
    const int owner_quota = mass_o - moved;
#pragma unroll
    for (int r = 0; r < P; ++r) {
      const bool is_owner = r == o;
      if (has(members, r)) st.quota[quota_used + r - begin] = is_owner ? owner_quota : take[r];
      counters[r] += (has(members, r) ? 1 : 0) + (is_owner ? 1 << kSent : 0);
      load[r] += take[r] - (is_owner ? moved : 0);
    }
    if (((pick<P>(counters, o) >> kSent) & 0xff) >= S) alive &= ~(1u << o);
    if (!owner_in) st.quota[quota_used + size] = owner_quota;
    store_broadcast(st, num_broadcasts, expert, o, level, begin, size, quota_used);
    ++num_broadcasts;
    quota_used += entries;
  }
#pragma unroll
  for (int r = 0; r < P; ++r) st.load[r] = load[r];
  return num_broadcasts;
}

}  // namespace iser::cuda::plan_detail
