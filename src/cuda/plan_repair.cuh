// Stage 4 of the planner kernel (plan.cuh): quota repair (docs/design.md §4.4, src/core/planner/
// repair.cpp), 2 rounds x (seats - 1) circle-method phases of pair trades, exactly the CPU's.
//
// Scheduled path (every plan whose pair lists fit kPairPoolWords):
//   lists   all side warps: per rank a bitset of the sorted broadcasts it hosts (built in the
//           set-up loop), then per pair of round 1 the broadcasts both host, as compact quota
//           index pairs; a pair with fewer than two cannot trade (a pull and a give on one
//           broadcast exclude each other) and gets no list
//   levels  (P > kPhaseStepMaxRanks) one warp: each listed pair gets level 1 + max(levels of
//           its two ranks' previous listed pairs), both rounds (plan_repair_schedule.cuh: by
//           iterating over the listed pairs, or by walking the rotations)
//   trades  one warp, level by level (or, P <= kPhaseStepMaxRanks, phase by phase over the
//           rotations with a listed pair), a lane per pair, __syncwarp between steps
// NOTE: why levels give the CPU's result: two pair trades touch a common quota entry only if
// they share a rank, and a later pair sharing a rank with an earlier one gets a higher level, so
// every entry sees its trades in the CPU's order; pairs of one level have disjoint ranks. Pairs
// without a list change nothing, wherever they run. On the bench inputs the levels are 10-14
// deep at EP8-64 where the phases are 14-126 (rotations with a listed pair: 12-85).
// Fallback (pair lists overflow): phase by phase, one warp per pair, a named barrier per phase.
#pragma once

#include "cuda/plan_stages.cuh"

namespace iser::cuda {

namespace plan_detail {

// One direction of a trade on the whole warp, over num_items items in order: load(k, ir, id,
// pull, give) gives item k's entry indices (ir < 0: not traded) and what it could pull and give.
// Warp sums, then the greedy fill with inclusive scans: item k keeps min(x_k, max(0, delta - sum
// of x before k)) for x = pull and x = give. Warp-uniform control flow; the items are distinct
// quota entries, so the lanes' writes are too.
template <typename LoadItem>
__device__ __forceinline__ void warp_trade(int2* entry, int num_items, int lane, LoadItem&& load) {
  int sum_pull = 0;
  int sum_give = 0;
#pragma unroll 1
  for (int base = 0; base < num_items; base += 32) {
    int ir, id, pull, give;
    load(base + lane, ir, id, pull, give);
    sum_pull += __reduce_add_sync(PlanConfig::kFullMask, pull);
    sum_give += __reduce_add_sync(PlanConfig::kFullMask, give);
  }
  const int delta = min(sum_pull, sum_give);
  if (delta <= 0) return;
  int pulled = 0;
  int given = 0;
#pragma unroll 1
  for (int base = 0; base < num_items && (pulled < delta || given < delta); base += 32) {
    int ir, id, pull, give;
    load(base + lane, ir, id, pull, give);
    const int pull_incl = warp_inclusive_scan(pull, lane);
    const int give_incl = warp_inclusive_scan(give, lane);
    const int take = min(pull, max(0, delta - (pulled + pull_incl - pull)));
    const int release = min(give, max(0, delta - (given + give_incl - give)));
    if (ir >= 0 && (take != 0 || release != 0)) {
      entry[ir].y += take - release;
      entry[id].y += release - take;
    }
    pulled += __shfl_sync(PlanConfig::kFullMask, pull_incl, 31);
    given += __shfl_sync(PlanConfig::kFullMask, give_incl, 31);
  }
}

// Fallback, one trade (one warp): receiver a takes spare quota of donor d for its own routes and
// releases as much of its own spare quota to d, over the broadcasts both host, in expert order.
__device__ __forceinline__ void trade(const State& st, int num_broadcasts, int a, int d, int lane) {
  warp_trade(st.entry, num_broadcasts, lane, [&](int k, int& ia, int& id, int& pull, int& give) {
    ia = -1;
    id = -1;
    pull = 0;
    give = 0;
    if (k >= num_broadcasts) return;
    const int b = st.order[k];
    ia = st.host_index(b, a);
    id = st.host_index(b, d);
    if (ia < 0 || id < 0) {
      ia = -1;
      return;
    }
    const int2 a = st.entry[ia];
    const int2 d = st.entry[id];
    pull = min(max(0, a.x - a.y), max(0, d.y - d.x));
    give = max(0, a.y - a.x);
  });
}

// Both directions of pair (a, d) by trade(): the general path (B > 32 * kRepairChunks, rare), out
// of line to keep the kernel's code small, and one call for both directions because every call
// site copies the State.
// NOTE: State goes by value: by reference its address escapes, so every thread of the kernel
// would store the whole State to local memory at start (240 bytes, 30 STL.64 per thread, on
// the planner's critical path) for a call that almost never happens. The copy is made at the
// call site instead (~140 instructions there, none of them executed unless the call is).
inline __device__ __noinline__ void trade_pair(const State st, int num_broadcasts, int a, int d,
                                               int lane) {
  trade(st, num_broadcasts, a, d, lane);
  __syncwarp();
  trade(st, num_broadcasts, d, a, lane);
}

// Fallback register path (B <= 32 * kRepairChunks): lane k of chunk j holds sorted broadcast
// 32 j + k's group, owner and quota offset for the whole repair, so a pair costs four shared
// loads per held broadcast and both directions run on registers.
inline constexpr int kRepairChunks = 3;

struct SortedLane {
  int begin = 0;
  int size = 0;
  int owner = -1;
  int offset = 0;
  bool valid = false;

  __device__ __forceinline__ int host_index(int r) const {
    if (!valid) return -1;
    if (r >= begin && r < begin + size) return offset + r - begin;
    return r == owner ? offset + size : -1;
  }
};

// One direction: the receiver (own routes c_r, quota q_r) trades with the donor (c_d, q_d) over
// K chunks of sorted broadcasts (chunk 0's lanes, then chunk 1's, ...). Items that are not
// shared broadcasts hold zeros, so they neither pull nor give. Greedy fill in sorted order: item
// i keeps min(x_i, max(0, delta - Σ_{j<i} x_j)) for x = pull and x = give; a side whose total is
// delta keeps every item under that formula, so both sides use it without a branch, and their
// 2K scans are independent (interleaved: one scan's latency, not 2K).
template <int K>
__device__ __forceinline__ void trade_one_way(const int (&c_r)[K], int (&q_r)[K],
                                              const int (&c_d)[K], int (&q_d)[K], int num_items,
                                              int lane) {
  int pull[K];
  int give[K];
  int my_pull = 0;
  int my_give = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    pull[k] = min(max(0, c_r[k] - q_r[k]), max(0, q_d[k] - c_d[k]));
    give[k] = max(0, q_r[k] - c_r[k]);
    my_pull += pull[k];
    my_give += give[k];
  }
  const int sum_pull = __reduce_add_sync(PlanConfig::kFullMask, my_pull);
  const int sum_give = __reduce_add_sync(PlanConfig::kFullMask, my_give);
  const int delta = min(sum_pull, sum_give);
  if (delta <= 0) return;
  if (delta < sum_pull || delta < sum_give) {  // otherwise both sides are taken whole
    int pull_incl[K];
    int give_incl[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      pull_incl[k] = pull[k];
      give_incl[k] = give[k];
    }
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      if (K == 1 && d >= num_items) break;  // items sit in lanes [0, num_items)
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int np = __shfl_up_sync(PlanConfig::kFullMask, pull_incl[k], d);
        const int ng = __shfl_up_sync(PlanConfig::kFullMask, give_incl[k], d);
        if (lane >= d) {
          pull_incl[k] += np;
          give_incl[k] += ng;
        }
      }
    }
    int pull_carry = 0;
    int give_carry = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int pull_before = pull_carry + pull_incl[k] - pull[k];
      const int give_before = give_carry + give_incl[k] - give[k];
      if (k + 1 < K) {
        pull_carry += __shfl_sync(PlanConfig::kFullMask, pull_incl[k], 31);
        give_carry += __shfl_sync(PlanConfig::kFullMask, give_incl[k], 31);
      }
      pull[k] = min(pull[k], max(0, delta - pull_before));
      give[k] = min(give[k], max(0, delta - give_before));
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    q_r[k] += pull[k] - give[k];
    q_d[k] += give[k] - pull[k];
  }
}

// Both directions of one pair over the first K chunks of the lane's sorted broadcasts.
template <int K>
__device__ __forceinline__ void trade_pair_registers(const State& st,
                                                     const SortedLane (&lanes)[kRepairChunks],
                                                     int num_broadcasts, int a, int d, int lane) {
  static_assert(K <= kRepairChunks);
  int ia[K], id[K];
  int ca[K], qa[K], cd[K], qd[K];
  bool any = false;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    ia[k] = lanes[k].host_index(a);
    id[k] = lanes[k].host_index(d);
    if (id[k] < 0) ia[k] = -1;
    any |= ia[k] >= 0;
  }
  if (!__any_sync(PlanConfig::kFullMask, any)) return;  // the pair shares no broadcast
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const bool shared = ia[k] >= 0;
    const int2 a = shared ? st.entry[ia[k]] : make_int2(0, 0);
    const int2 d = shared ? st.entry[id[k]] : make_int2(0, 0);
    ca[k] = a.x;
    qa[k] = a.y;
    cd[k] = d.x;
    qd[k] = d.y;
  }
  int qa0[K];
#pragma unroll
  for (int k = 0; k < K; ++k) qa0[k] = qa[k];
  trade_one_way(ca, qa, cd, qd, num_broadcasts, lane);  // receiver a, donor d
  trade_one_way(cd, qd, ca, qa, num_broadcasts, lane);  // receiver d, donor a
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (ia[k] >= 0 && qa[k] != qa0[k]) {  // a pair's quotas change together (sum is kept)
      st.entry[ia[k]].y = qa[k];
      st.entry[id[k]].y = qd[k];
    }
  }
}

// Fallback: quota repair phase by phase on side warps 0 .. repair_warps - 1 of
// num_side_warps (the CTA's warps 1 .., beside warp 0's coloring): one warp per pair of a phase
// (the pairs of a phase are disjoint), the repair warps meet at named barrier 1 after every
// phase.
__device__ __forceinline__ void repair_by_phases(const State& st, int B, int side_warp,
                                                 int num_side_warps, int lane) {
  const int P = st.P;
  const int seats = P + (P & 1);  // odd P: seat P is the bye
  const int ring_size = seats - 1;
  const int num_pairs = seats / 2;
  const int repair_warps = min(num_pairs, num_side_warps);
  if (side_warp >= repair_warps) return;
  const int chunks = (B + 31) / 32;
  const bool in_registers = chunks <= kRepairChunks;
  SortedLane lanes[kRepairChunks];
#pragma unroll
  for (int k = 0; k < kRepairChunks; ++k) {
    const int sorted = k * 32 + lane;
    if (in_registers && sorted < B) {
      const int b = st.order[sorted];
      lanes[k] = {st.b_begin[b], st.b_size[b], st.b_owner[b], st.b_quota_offset[b], true};
    }
  }
#pragma unroll 1
  for (int phase = 0; phase < 2 * ring_size; ++phase) {
    const int rot = phase < ring_size ? phase : phase - ring_size;
    // ring after `rot` right rotations of [1 .. seats-1]: ring[i] = 1 + (i - rot) mod n, with
    // 0 <= i <= n and 0 <= rot < n (two conditional subtractions, no division).
    auto ring = [&](int i) {
      int x = i - rot + ring_size;
      x = x >= ring_size ? x - ring_size : x;
      x = x >= ring_size ? x - ring_size : x;
      return 1 + x;
    };
#pragma unroll 1
    for (int w = side_warp; w < num_pairs; w += num_side_warps) {
      const int a = w == 0 ? 0 : ring(w);
      const int d = w == 0 ? ring(0) : ring(seats - 1 - w);
      if (a >= P || d >= P) continue;
      if (chunks == 1) {
        trade_pair_registers<1>(st, lanes, B, a, d, lane);
      } else if (in_registers) {
        trade_pair_registers<kRepairChunks>(st, lanes, B, a, d, lane);
      } else {
        trade_pair(st, B, a, d, lane);
      }
    }
    named_barrier(1, repair_warps * 32);
  }
}

// Register repair for P <= kRegisterRepairMaxRanks and B <= 32 (EP2-6) on one warp: lane k
// holds sorted broadcast k's (own routes, quota) of each seat of the circle method (zeros where
// the seat's rank is not a host) for the whole repair and runs every pair of a phase at once.
// Values sit by ring position, not by rank: the pairs of a phase are then the same positions in
// every phase (compile-time constants, so plain registers: no select by a run-time rank, no
// shared memory, no barrier between phases), and the ring's right rotation after a phase is a
// rotation of the registers. A direction is kSeats warp sums and, when a side is taken only in
// part, one interleaved scan of the kSeats values.
// NOTE: same result as repair_by_phases: the pairs of a phase are disjoint, each direction is
// trade_one_way's greedy fill in sorted order (a non-shared item pulls and gives 0), and a seat
// >= P is never a host (odd P: the bye seat P). After 2 (kSeats - 1) rotations of the kSeats - 1
// ring positions every value is back at its rank's position.
// NOTE: 6, not 8: with 8 seats a phase took 0.42 us against 0.29 with 4 and 0.37 with 6, and the
// repair at EP8 5.89 us against 4.77 for the scheduled one (pair lists, levels, trades); at EP6
// 3.71 against 4.61 by phases, at EP4 1.73 against 2.69 (H200).
inline constexpr int kRegisterRepairMaxRanks = 6;

template <int kSeats>
struct SeatValues {
  bool host[kSeats];
  int own[kSeats];
  int quota[kSeats];
};

// Positions of pair j of a phase (repair.cpp's circle method with the ring at positions 1 ..
// kSeats - 1): (0, ring[0]), then (ring[j], ring[kSeats - 1 - j]).
__host__ __device__ constexpr int seat_first(int j) {
  return j == 0 ? 0 : j + 1;
}
template <int kSeats>
__host__ __device__ constexpr int seat_second(int j) {
  return j == 0 ? 1 : kSeats - j;
}

// One direction of every pair of the phase: receiver first, donor second (kSwap: the reverse).
template <int kSeats, bool kSwap>
__device__ __forceinline__ void seats_direction(SeatValues<kSeats>& v, int num_items, int lane) {
  constexpr int kPairs = kSeats / 2;
  int x[2 * kPairs];  // pull, give of pair 0, then of pair 1, ...
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int a = kSwap ? seat_second<kSeats>(j) : seat_first(j);
    const int d = kSwap ? seat_first(j) : seat_second<kSeats>(j);
    const bool shared = v.host[a] && v.host[d];
    const int ca = v.own[a];
    const int qa = v.quota[a];
    x[2 * j] = shared ? min(max(0, ca - qa), max(0, v.quota[d] - v.own[d])) : 0;
    x[2 * j + 1] = shared ? max(0, qa - ca) : 0;
  }
  int sum[2 * kPairs];
#pragma unroll
  for (int i = 0; i < 2 * kPairs; ++i) sum[i] = __reduce_add_sync(PlanConfig::kFullMask, x[i]);
  int delta[kPairs];
  bool any = false;
  bool partial = false;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    delta[j] = min(sum[2 * j], sum[2 * j + 1]);
    any |= delta[j] > 0;
    partial |= delta[j] < max(sum[2 * j], sum[2 * j + 1]);
  }
  if (!any) return;  // warp-uniform
  // The sum before each item: 0 serves where a side is taken whole (then min(x, delta) = x).
  int before[2 * kPairs];
#pragma unroll
  for (int i = 0; i < 2 * kPairs; ++i) before[i] = 0;
  if (partial) {
    int incl[2 * kPairs];
#pragma unroll
    for (int i = 0; i < 2 * kPairs; ++i) incl[i] = x[i];
    warp_inclusive_scans(incl, lane, num_items);
#pragma unroll
    for (int i = 0; i < 2 * kPairs; ++i) before[i] = incl[i] - x[i];
  }
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int a = kSwap ? seat_second<kSeats>(j) : seat_first(j);
    const int d = kSwap ? seat_first(j) : seat_second<kSeats>(j);
    const int take = min(x[2 * j], max(0, delta[j] - before[2 * j]));
    const int release = min(x[2 * j + 1], max(0, delta[j] - before[2 * j + 1]));
    v.quota[a] += take - release;
    v.quota[d] += release - take;
  }
}

// The ring's right rotation: position 1 takes position kSeats - 1's values, position i + 1
// position i's.
template <int kSeats, typename T>
__host__ __device__ __forceinline__ void rotate_ring(T (&x)[kSeats]) {
  const T last = x[kSeats - 1];
#pragma unroll
  for (int i = kSeats - 1; i > 1; --i) x[i] = x[i - 1];
  x[1] = last;
}

// The arrays the register repair reads (shared memory; generic pointers: a handful of loads).
struct SeatView {
  const int32_t* order;
  const int32_t* b_begin;
  const int32_t* b_size;
  const int32_t* b_owner;
  const int32_t* b_quota_offset;
  int2* entry;
};

template <int kSeats>
__device__ __forceinline__ void repair_seats(const SeatView& st, int B, int lane) {
  SortedLane me;
  if (lane < B) {
    const int b = st.order[lane];
    me = {st.b_begin[b], st.b_size[b], st.b_owner[b], st.b_quota_offset[b], true};
  }
  SeatValues<kSeats> v;
#pragma unroll
  for (int r = 0; r < kSeats; ++r) {
    const int idx = me.host_index(r);
    v.host[r] = idx >= 0;
    const int2 e = idx >= 0 ? st.entry[idx] : make_int2(0, 0);
    v.own[r] = e.x;
    v.quota[r] = e.y;
  }
#pragma unroll 1
  for (int phase = 0; phase < 2 * (kSeats - 1); ++phase) {
    seats_direction<kSeats, false>(v, B, lane);
    seats_direction<kSeats, true>(v, B, lane);
    if constexpr (kSeats > 2) {
      rotate_ring(v.host);
      rotate_ring(v.own);
      rotate_ring(v.quota);
    }
  }
#pragma unroll
  for (int r = 0; r < kSeats; ++r) {
    const int idx = me.host_index(r);
    if (idx >= 0) st.entry[idx].y = v.quota[r];
  }
}

// P <= kRegisterRepairMaxRanks and B <= 32: the circle method's seats (P, or P + 1 for odd P).
// NOTE: out of line, with the arrays as plain arguments (no State: see RepairView's NOTE):
// inlined, its three instantiations moved the code after them, and the scheduled trades at
// EP8-32, which never run this, took 0.45-0.75 us longer (code placement, H200).
inline __device__ __noinline__ void repair_registers(const int32_t* order, const int32_t* b_begin,
                                                     const int32_t* b_size, const int32_t* b_owner,
                                                     const int32_t* b_quota_offset, int2* entry,
                                                     int P, int B, int lane) {
  const SeatView st{order, b_begin, b_size, b_owner, b_quota_offset, entry};
  const int seats = P + (P & 1);
  if (seats == 2) {
    repair_seats<2>(st, B, lane);
  } else if (seats == 4) {
    repair_seats<4>(st, B, lane);
  } else {
    repair_seats<6>(st, B, lane);
  }
}
static_assert(kRegisterRepairMaxRanks <= 6, "repair_registers instantiates 2, 4 and 6 seats");

// Pair w of rotation rot of the circle method (repair.cpp): (0, ring[0]) for w = 0, else
// (ring[w], ring[seats - 1 - w]); ring after rot right rotations of [1 .. seats - 1]:
// ring[i] = 1 + (i - rot) mod ring_size, 0 <= i <= ring_size, 0 <= rot < ring_size.
__device__ __forceinline__ void circle_pair(int rot, int w, int seats, int& a, int& d) {
  const int ring_size = seats - 1;
  auto ring = [&](int i) {
    int x = i - rot + ring_size;
    x = x >= ring_size ? x - ring_size : x;
    x = x >= ring_size ? x - ring_size : x;
    return 1 + x;
  };
  a = w == 0 ? 0 : ring(w);
  d = w == 0 ? ring(0) : ring(seats - 1 - w);
}

// Up to this P the trades run phase by phase (the rotations with a listed pair) without levels:
// the level pass costs a step per such phase too (0.05-0.1 us on H200), so levels pay only where
// they are far fewer than the phases (EP8: 12 phases, 10 levels; EP64: 85 phases, 12 levels).
// Measured with the pipelined level pass (levels + trades, µs, levels from P = 8
// against this split): EP8 1.63 + 2.66 against 0.38 + 3.42, EP16 2.53 + 3.65 against 0.42 +
// 5.79; planner EP8 19.87 / 20.29 against 19.26 / 19.10, EP16 26.91 / 27.42 against 26.82 /
// 26.91 (two rounds each). With the node level pass (plan_repair_schedule.cuh) from P = 8, EP16
// took levels 3.23 + trades 3.36 us against 0.48 + 4.58 by phases: still phases.
inline constexpr int kPhaseStepMaxRanks = 24;
static_assert(kPhaseStepMaxRanks <= 64, "the phase path gives each lane one pair slot");

// A rank's pair in one rotation, as the level pass reads it (rank_code[rot][r], written with the
// pair lists): the partner (the rank itself for the bye of odd P), whether the pair is listed,
// whether the rank is the pair's receiver a, the pair's index w and, for the node level pass, the
// listed pair's node number.
struct RankCode {
  static constexpr int kListed = 1 << 8;
  static constexpr int kReceiver = 1 << 9;
  static constexpr int kPairShift = 10;
  static constexpr int kNodeShift = 16;
  __device__ __forceinline__ static int make(int partner, bool listed, bool receiver, int w,
                                             int node) {
    return partner | (listed ? kListed : 0) | (receiver ? kReceiver : 0) | w << kPairShift |
           node << kNodeShift;
  }
  __device__ __forceinline__ static int pair(int code) { return (code >> kPairShift) & 63; }
  __device__ __forceinline__ static int node(int code) { return code >> kNodeShift; }
};
static_assert(kGpuMaxRanks < 256, "RankCode keeps the partner in 8 bits");
static_assert((kGpuMaxRanks + 1) / 2 <= 64, "RankCode keeps the pair index in 6 bits");

// A listed pair as the node level pass reads it (level_nodes[node], written with the pair
// lists): its rotation, receiver a, donor d and index w, a byte each.
struct NodeCode {
  int code;
  __device__ __forceinline__ static int make(int rot, int a, int d, int w) {
    return rot | a << 8 | d << 16 | w << 24;
  }
  __device__ __forceinline__ int rot() const { return code & 0xff; }
  __device__ __forceinline__ int a() const { return (code >> 8) & 0xff; }
  __device__ __forceinline__ int d() const { return (code >> 16) & 0xff; }
  __device__ __forceinline__ int w() const { return code >> 24; }
};

// Lists: per pair of round 1 (rotation, w) the sorted broadcasts both ranks host, as compact
// quota indices (receiver a's | donor d's << 16), in pair_items; pair_head = offset | n << 16
// (n >= 2), 0 for no list. Runs on whole warps, num_threads threads (thread t of them); one pool
// atomic per warp and round. The pool top past kPairPoolWords after the barrier means the lists
// did not fit (no list is written past it). Above kPhaseStepMaxRanks the listed pairs are also
// numbered for the node level pass (plan_repair_schedule.cuh: kNodeCountWord of them, a
// NodeCode in level_nodes for those below kMaxLevelNodes) and each rank's listed rotations are
// marked in list_bits.
__device__ __forceinline__ void build_pair_lists(const State& st, int B, int t, int num_threads) {
  const int P = st.P;
  const int seats = P + (P & 1);
  const int num_pairs = seats / 2;
  const int total = (seats - 1) * num_pairs;
  const int words = (B + 31) / 32;
  const int lane = t & 31;
#pragma unroll 1
  for (int idx = t; idx - lane < total; idx += num_threads) {  // warp-uniform trip count
    const int rot = idx / num_pairs;
    int a = P;
    int d = P;
    if (idx < total) circle_pair(rot, idx - rot * num_pairs, seats, a, d);
    int n = 0;
    if (a < P && d < P) {
#pragma unroll 1
      for (int j = 0; j < words; ++j)
        n += __popc(st.host_bits[a * words + j] & st.host_bits[d * words + j]);
    }
    n = n >= 2 ? n : 0;
    const int incl = warp_inclusive_scan(n, lane);
    const int warp_words = __shfl_sync(PlanConfig::kFullMask, incl, 31);
    int first = 0;
    if (lane == 0 && warp_words > 0) first = atomicAdd(&st.scalars[kPoolTopWord], warp_words);
    const int offset = __shfl_sync(PlanConfig::kFullMask, first, 0) + incl - n;
    const bool listed = n > 0 && offset + n <= kPairPoolWords;
    if (listed) {
      int i = offset;
#pragma unroll 1
      for (int j = 0; j < words; ++j) {
        unsigned m = st.host_bits[a * words + j] & st.host_bits[d * words + j];
        while (m != 0) {
          const int b = st.order[32 * j + __ffs(m) - 1];
          m &= m - 1;
          st.pair_items[i++] = st.host_index(b, a) | st.host_index(b, d) << 16;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 3; ++j) {      // <= 71 rotations, a word per 32
      if (32 * j >= seats - 1) break;  // CTA-uniform: one word up to P = 32
      const unsigned bits =
          __reduce_or_sync(PlanConfig::kFullMask, listed && rot / 32 == j ? 1u << (rot % 32) : 0u);
      if (lane == 0 && bits != 0) {
        atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kPhaseBitsWord + j]), bits);
      }
    }
    int node = 0;
    if (P > kPhaseStepMaxRanks) {  // CTA-uniform
      const unsigned listed_lanes = __ballot_sync(PlanConfig::kFullMask, listed);
      int node_first = 0;
      if (lane == 0 && listed_lanes != 0) {
        node_first = atomicAdd(&st.scalars[kNodeCountWord], __popc(listed_lanes));
      }
      node = __shfl_sync(PlanConfig::kFullMask, node_first, 0) +
             __popc(listed_lanes & ((1u << lane) - 1u));
      if (listed) {
        if (node < kMaxLevelNodes) {
          st.level_nodes[node] = NodeCode::make(rot, a, d, idx - rot * num_pairs);
        }
        atomicOr(&st.list_bits[3 * a + rot / 32], 1u << (rot % 32));
        atomicOr(&st.list_bits[3 * d + rot / 32], 1u << (rot % 32));
      }
    }
    if (idx < total) {
      st.pair_head[idx] = listed ? offset | n << 16 : 0;
      const int w = idx - rot * num_pairs;
      // The bye of odd P: the real rank of the pair is paired with itself, never listed.
      if (a < P) st.rank_code[rot * P + a] = RankCode::make(d < P ? d : a, listed, true, w, node);
      if (d < P) st.rank_code[rot * P + d] = RankCode::make(a < P ? a : d, listed, false, w, node);
    }
  }
}

// The arrays of the scheduled repair, built in registers inside the out-of-line
// repair_scheduled from shared-memory word offsets. NOTE: a State passed by value to an
// out-of-line function lives in local memory and is re-read after every __syncwarp (measured:
// ~0.07-0.1 us more per step at EP8).
struct RepairView {
  int P;
  int2* entry;
  const int32_t* pair_head;
  const int32_t* rank_code;
  int32_t* rotations;
  const int32_t* pair_items;
  int32_t* level_table;
  const int32_t* scalars;
};

// One direction of a listed trade in registers: receiver r = {own routes, quota} per item takes
// from donor d and releases as much, greedy in sorted order (repair.cpp: trade). Items past the
// list hold zeros, so they neither pull nor give.
inline constexpr int kListRegs = 4;  // longest list traded in registers (bench inputs: 4)

// NOTE: no branch: with delta <= 0 every take and release below is 0 (min(x, max(0, <= 0))), the
// CPU's early return. Item k keeps min(x_k, max(0, delta - sum of x before k)), x = pull and
// give (the items before k took min(delta, their sum)); the prefixes do not depend on delta, so
// the dependent chain of a direction is load, pull, sum, delta, take, quota: about eight
// integer operations.
__device__ __forceinline__ void trade_listed(int2 (&r)[kListRegs], int2 (&d)[kListRegs]) {
  static_assert(kListRegs == 4, "the sums below are written out for four items");
  int pull[kListRegs];
  int give[kListRegs];
#pragma unroll
  for (int k = 0; k < kListRegs; ++k) {
    pull[k] = min(max(0, r[k].x - r[k].y), max(0, d[k].y - d[k].x));
    give[k] = max(0, r[k].y - r[k].x);
  }
  const int pull_before[kListRegs] = {0, pull[0], pull[0] + pull[1], pull[0] + pull[1] + pull[2]};
  const int give_before[kListRegs] = {0, give[0], give[0] + give[1], give[0] + give[1] + give[2]};
  const int delta =
      min((pull[0] + pull[1]) + (pull[2] + pull[3]), (give[0] + give[1]) + (give[2] + give[3]));
#pragma unroll
  for (int k = 0; k < kListRegs; ++k) {
    const int take = min(pull[k], max(0, delta - pull_before[k]));
    const int release = min(give[k], max(0, delta - give_before[k]));
    r[k].y += take - release;
    d[k].y += release - take;
  }
}

// One direction of a list longer than kListRegs (rare), on the whole warp (warp_trade): the
// receiver's entry index at bit shift_r of each item, the donor's at shift_d.
__device__ __forceinline__ void trade_list_on_warp(const RepairView& st, const int32_t* items,
                                                   int n, int shift_r, int shift_d, int lane) {
  warp_trade(st.entry, n, lane, [&](int k, int& er, int& ed, int& pull, int& give) {
    er = -1;
    ed = -1;
    pull = 0;
    give = 0;
    if (k >= n) return;
    er = (items[k] >> shift_r) & 0xffff;
    ed = (items[k] >> shift_d) & 0xffff;
    const int2 r = st.entry[er];
    const int2 d = st.entry[ed];
    pull = min(max(0, r.x - r.y), max(0, d.y - d.x));
    give = max(0, r.y - r.x);
  });
}

// The lanes' pairs with lists longer than kListRegs (`head` per lane, 0 = none), one at a time
// on the whole warp, both directions (receiver a first).
__device__ __forceinline__ void trade_long_lists(const RepairView& st, int head, int lane) {
  unsigned pending = __ballot_sync(PlanConfig::kFullMask, (head >> 16) > kListRegs);
  while (pending != 0) {
    const int h = __shfl_sync(PlanConfig::kFullMask, head, __ffs(pending) - 1);
    pending &= pending - 1;
    const int32_t* items = st.pair_items + (h & 0xffff);
    trade_list_on_warp(st, items, h >> 16, 0, 16, lane);  // receiver a, donor d
    __syncwarp();
    trade_list_on_warp(st, items, h >> 16, 16, 0, lane);  // receiver d, donor a
    __syncwarp();
  }
}

// A listed pair in registers: its head and list (items past the list are 0).
struct ListedPair {
  int head = 0;
  int item[kListRegs] = {};

  __device__ __forceinline__ void load(const RepairView& st, int h) {
    head = h;
    const int n = h >> 16;
    const int32_t* items = st.pair_items + (h & 0xffff);
#pragma unroll
    for (int k = 0; k < kListRegs; ++k) item[k] = k < n ? items[k] : 0;
  }
  // Item k is traded in registers: inside the list, and the list is not a long one.
  __device__ __forceinline__ bool in_registers(int k) const {
    const int n = head >> 16;
    return k < n && n <= kListRegs;
  }
};

// Both directions of a listed pair (receiver a first, as repair.cpp's run_pair), from its
// entries (loaded by the caller, so that several pairs' loads are in flight at once).
struct PairTrade {
  int2 a[kListRegs], d[kListRegs];  // {own routes, quota} of receiver a's and donor d's entries

  __device__ __forceinline__ void load(const RepairView& st, const ListedPair& pair) {
#pragma unroll
    for (int k = 0; k < kListRegs; ++k) {
      const bool on = pair.in_registers(k);
      a[k] = on ? st.entry[pair.item[k] & 0xffff] : make_int2(0, 0);
      d[k] = on ? st.entry[pair.item[k] >> 16] : make_int2(0, 0);
    }
  }
  // Lists longer than kListRegs hold zeros here (trade_long_lists trades them). Every item of
  // the list is stored back, changed or not: the pairs of a step hold disjoint entries.
  __device__ __forceinline__ void run(const RepairView& st, const ListedPair& pair) {
    trade_listed(a, d);  // receiver a, donor d
    trade_listed(d, a);  // receiver d, donor a
#pragma unroll
    for (int k = 0; k < kListRegs; ++k) {
      if (pair.in_registers(k)) {
        st.entry[pair.item[k] & 0xffff].y = a[k].y;
        st.entry[pair.item[k] >> 16].y = d[k].y;
      }
    }
  }
};

// The steps of the scheduled trades, as rows of pair heads (0 = none), a slot per pair:
// LevelRows: the levels, level_table rows indexed by the pair's receiver rank.
struct LevelRows {
  const int32_t* table;
  int width;    // P
  int row = 0;  // the row head() reads; advance() before the first
  __device__ __forceinline__ void advance() { ++row; }
  __device__ __forceinline__ int head(int slot) const {
    return slot < width ? table[row * width + slot] : 0;
  }
};

// PhaseRows: the circle-method phases whose rotation has a listed pair, in the CPU's order (both
// rounds: the rotations repeat), pair_head rows indexed by the pair's seat w. `rotations` lists
// the rotations with a listed pair in ascending order (list_rotations).
struct PhaseRows {
  const int32_t* heads;
  int width;  // num_pairs
  const int32_t* rotations;
  int num_rotations;  // >= 1
  int index = -1;     // in rotations[], cyclic; advance() before the first
  int row = 0;        // the rotation head() reads
  __device__ __forceinline__ void advance() {
    index = index + 1 == num_rotations ? 0 : index + 1;
    row = rotations[index];
  }
  __device__ __forceinline__ int head(int slot) const {
    return slot < width ? heads[row * width + slot] : 0;
  }
};

// The rotations with a listed pair (kPhaseBitsWord ..), ascending, into `rotations` (one warp).
// Returns how many.
__device__ __forceinline__ int list_rotations(const int32_t* scalars, int32_t* rotations,
                                              int lane) {
  int count = 0;
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    const unsigned bits = static_cast<unsigned>(scalars[kPhaseBitsWord + j]);
    if ((bits >> lane) & 1u) rotations[count + __popc(bits & ((1u << lane) - 1u))] = 32 * j + lane;
    count += __popc(bits);
  }
  __syncwarp();
  return count;
}

// Stage 4, scheduled trades (one warp): num_steps steps of disjoint pairs, __syncwarp between
// steps, lane l taking slots l + 32 c, c < K. Software-pipelined: at step i the quotas of i, the
// lists of i + 1 and the heads of i + 2 are loaded together (lists and heads do not change), so
// a step costs one shared round trip and its arithmetic.
template <int K, typename Rows>
__device__ __forceinline__ void trade_steps(const RepairView& st, Rows rows, int num_steps,
                                            int lane) {
  ListedPair cur[K];
  int next_head[K];
  rows.advance();  // step 1
#pragma unroll
  for (int c = 0; c < K; ++c) cur[c].load(st, num_steps >= 1 ? rows.head(lane + 32 * c) : 0);
  rows.advance();  // step 2
#pragma unroll
  for (int c = 0; c < K; ++c) next_head[c] = num_steps >= 2 ? rows.head(lane + 32 * c) : 0;
#pragma unroll 1
  for (int step = 1; step <= num_steps; ++step) {
    PairTrade trade[K];
    ListedPair next[K];
#pragma unroll
    for (int c = 0; c < K; ++c) {
      trade[c].load(st, cur[c]);
      next[c].load(st, next_head[c]);
    }
    rows.advance();  // step + 2, while the loads above are in flight
#pragma unroll
    for (int c = 0; c < K; ++c) next_head[c] = step + 2 <= num_steps ? rows.head(lane + 32 * c) : 0;
#pragma unroll
    for (int c = 0; c < K; ++c) trade[c].run(st, cur[c]);
    __syncwarp();
    bool any_long = false;
#pragma unroll
    for (int c = 0; c < K; ++c) any_long |= (cur[c].head >> 16) > kListRegs;
    if (__any_sync(PlanConfig::kFullMask, any_long)) {  // rare (none on the bench inputs)
#pragma unroll 1
      for (int c = 0; c < K; ++c) {
        int head = 0;
#pragma unroll
        for (int j = 0; j < K; ++j) head = j == c ? cur[j].head : head;  // no indexed registers
        trade_long_lists(st, head, lane);
      }
    }
#pragma unroll
    for (int c = 0; c < K; ++c) cur[c] = next[c];
  }
}

}  // namespace plan_detail

}  // namespace iser::cuda
