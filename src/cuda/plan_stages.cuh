// Device stages of the HALO-Q planner kernel (plan.cuh): configuration, the shared-memory layout,
// the views of it and stages 1 and 4 (column sums, quota repair); placement and coloring are in
// plan_place.cuh. Split from the kernel entry only to keep files short; see plan.cuh for the
// stage map and NOTEs.
#pragma once

#include <cstdint>

#include "cuda/planner_kernels.h"
#include "iser/gpu_planner.h"

namespace iser::cuda {

struct PlanConfig {
  static constexpr int kThreads = 512;
  static constexpr int kWarps = kThreads / 32;
  static constexpr unsigned kFullMask = 0xffffffffu;
  static constexpr int kRankChunks = (kGpuMaxRanks + 31) / 32;  // ranks per lane, at most
};

// Shared-memory layout of the plan kernel, in int32 words (made on the host, a kernel argument).
// The arrays of one candidate placement (loads, broadcasts, quotas) form one block of
// buffer_words words; iser plans up to three candidates in two such blocks (the kept one and the
// challenger), so a second block follows the first.
struct PlanSmem {
  int hist, candidates, home_load, load, expert_broadcast, b_expert, b_owner, b_level, b_begin,
      b_size, b_helper, b_mode, b_quota_offset, b_link, quota, buffer_words, order, own, left,
      spent, scalars, total;

  static PlanSmem make(int P, int E, int C, int max_broadcasts, int S, bool iser = false) {
    PlanSmem s{};
    const int quota_cap = P * S + max_broadcasts;
    int at = 0;
    auto take = [&at](int words) {
      const int begin = at;
      at += (words + 3) & ~3;  // 16-byte aligned arrays
      return begin;
    };
    s.hist = take(E);
    s.candidates = take(P * C);
    s.home_load = take(P);
    // ---- one candidate placement (State::use_buffer) ----
    const int buffer_begin = at;
    s.load = take(P);
    s.expert_broadcast = take(E);
    // NOTE: b_expert .. b_mode stay consecutive, equal-sized and in BroadcastField order: the
    // output stage reads broadcast field f at b_expert + f * (b_owner - b_expert).
    s.b_expert = take(max_broadcasts);
    s.b_owner = take(max_broadcasts);
    s.b_level = take(max_broadcasts);
    s.b_begin = take(max_broadcasts);
    s.b_size = take(max_broadcasts);
    s.b_helper = take(max_broadcasts);
    s.b_mode = take(max_broadcasts);
    s.b_quota_offset = take(max_broadcasts);
    s.b_link = take(iser ? max_broadcasts : 0);  // iser: previous broadcast of the same expert
    s.quota = take(quota_cap);
    s.buffer_words = at - buffer_begin;
    if (iser) take(s.buffer_words);  // the second candidate block
    s.order = take(max_broadcasts);
    s.own = take(quota_cap);
    s.left = take(iser ? E : 0);   // iser: routes of each expert its owner still computes
    s.spent = take(iser ? E : 0);  // iser: expert found no room (skipped for this owner)
    s.scalars = take(8);
    s.total = at;
    return s;
  }
};

namespace plan_detail {

enum Scalar { kStatusWord, kTargetWord, kNumBroadcastsWord, kTotalWord };

__device__ __forceinline__ unsigned long long global_timer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void named_barrier(int id, int num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// Inclusive scan over the lanes; only lanes [0, num_items) need to be exact.
__device__ __forceinline__ int warp_inclusive_scan(int v, int lane, int num_items = 32) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    if (d >= num_items) break;
    const int n = __shfl_up_sync(PlanConfig::kFullMask, v, d);
    if (lane >= d) v += n;
  }
  return v;
}

// Stage 1 column sums of the counts [P][E] into hist (zeroed), V = int or int4 (E % 4 == 0).
// Thread t sums vector column t % cols over the rows t / cols, + slices, ... in registers.
template <typename V>
__device__ __forceinline__ void column_sums(const int32_t* counts, int P, int E, int max_count,
                                            int32_t* hist, bool& bad, long long& partial, int tid) {
  constexpr int kVec = sizeof(V) / sizeof(int32_t);
  const int cols = E / kVec;
  const int slices = max(1, PlanConfig::kThreads / cols);
  constexpr int kUnroll = kVec == 4 ? 8 : 1;  // loads in flight on the fast path only
  const V* base = reinterpret_cast<const V*>(counts);
#pragma unroll 1
  for (int w = tid; w < slices * cols; w += PlanConfig::kThreads) {
    const int col = w % cols;
    int acc[kVec] = {};
#pragma unroll kUnroll
    for (int r = w / cols; r < P; r += slices) {
      const V v = __ldg(base + r * cols + col);
      const int* c = reinterpret_cast<const int*>(&v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        bad |= c[k] < 0 || c[k] > max_count;
        acc[k] += c[k];
      }
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      partial += acc[k];  // exact whenever no count is bad (<= 72 * 2^18 per column)
      if (acc[k] != 0) atomicAdd(&hist[col * kVec + k], acc[k]);
    }
  }
}

// Views of the shared arrays of one plan.
struct State {
  int P, E, S, H, C, num_levels, max_broadcasts, quota_cap;
  int32_t* hist;
  int32_t* expert_broadcast;
  int32_t* candidates;
  int32_t* load;
  int32_t* home_load;
  int32_t* b_expert;
  int32_t* b_owner;
  int32_t* b_level;
  int32_t* b_begin;
  int32_t* b_size;
  int32_t* b_helper;
  int32_t* b_mode;
  int32_t* b_quota_offset;
  int32_t* b_link;  // iser: previous broadcast of the same expert, -1 = none
  int32_t* order;
  int32_t* quota;  // compact: members of the group, then the owner when outside it
  int32_t* own;    // c[r][e_b] per compact entry
  int32_t* scalars;
  int32_t* left;   // iser: [E] routes the owner still computes
  int32_t* spent;  // iser: [E] 1 when no group had room for the expert
  int buffer_words;

  // Moves the views of one candidate placement's arrays (loads, broadcasts, quotas) by `delta`
  // candidate blocks (PlanSmem::buffer_words each).
  __device__ __forceinline__ void use_buffer(int delta) {
    const int w = delta * buffer_words;
    load += w;
    expert_broadcast += w;
    b_expert += w;
    b_owner += w;
    b_level += w;
    b_begin += w;
    b_size += w;
    b_helper += w;
    b_mode += w;
    b_quota_offset += w;
    b_link += w;
    quota += w;
  }

  // Compact quota index of rank r in broadcast b, -1 when r is not a host.
  __device__ __forceinline__ int host_index(int b, int r) const {
    const int begin = b_begin[b];
    const int size = b_size[b];
    if (r >= begin && r < begin + size) return b_quota_offset[b] + r - begin;
    if (r == b_owner[b]) return b_quota_offset[b] + size;
    return -1;
  }
  __device__ __forceinline__ bool owner_in_group(int b) const {
    const int o = b_owner[b];
    return o >= b_begin[b] && o < b_begin[b] + b_size[b];
  }
};

// Stage 4, one trade (one warp): receiver a takes spare quota of donor d for its own routes and
// releases as much of its own spare quota to d, over the broadcasts both host, in expert order.
// General path (B > 32 * kRepairChunks, rare): out of line to keep the kernel's code small.
__device__ __noinline__ void trade(const State& st, int num_broadcasts, int a, int d, int lane) {
  auto load_pair = [&](int k, int& ia, int& id, int& pull, int& give) {
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
    const int ca = st.own[ia];
    const int qa = st.quota[ia];
    const int cd = st.own[id];
    const int qd = st.quota[id];
    pull = min(max(0, ca - qa), max(0, qd - cd));
    give = max(0, qa - ca);
  };
  int sum_pull = 0;
  int sum_give = 0;
  for (int base = 0; base < num_broadcasts; base += 32) {
    int ia, id, pull, give;
    load_pair(base + lane, ia, id, pull, give);
    sum_pull += __reduce_add_sync(PlanConfig::kFullMask, pull);
    sum_give += __reduce_add_sync(PlanConfig::kFullMask, give);
  }
  const int delta = min(sum_pull, sum_give);
  if (delta <= 0) return;
  // Greedy fill in order: item i takes min(x_i, max(0, delta - Σ_{j<i} x_j)).
  int pulled = 0;
  int given = 0;
  for (int base = 0; base < num_broadcasts && (pulled < delta || given < delta); base += 32) {
    int ia, id, pull, give;
    load_pair(base + lane, ia, id, pull, give);
    const int pull_incl = warp_inclusive_scan(pull, lane);
    const int give_incl = warp_inclusive_scan(give, lane);
    const int take = min(pull, max(0, delta - (pulled + pull_incl - pull)));
    const int release = min(give, max(0, delta - (given + give_incl - give)));
    if (ia >= 0 && (take != 0 || release != 0)) {
      st.quota[ia] += take - release;
      st.quota[id] += release - take;
    }
    pulled += __shfl_sync(PlanConfig::kFullMask, pull_incl, 31);
    given += __shfl_sync(PlanConfig::kFullMask, give_incl, 31);
  }
}

// Stage 4 register path (B <= 32 * kRepairChunks): lane k of chunk j holds sorted broadcast
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
    ca[k] = shared ? st.own[ia[k]] : 0;
    qa[k] = shared ? st.quota[ia[k]] : 0;
    cd[k] = shared ? st.own[id[k]] : 0;
    qd[k] = shared ? st.quota[id[k]] : 0;
  }
  int qa0[K];
#pragma unroll
  for (int k = 0; k < K; ++k) qa0[k] = qa[k];
  trade_one_way(ca, qa, cd, qd, num_broadcasts, lane);  // receiver a, donor d
  trade_one_way(cd, qd, ca, qa, num_broadcasts, lane);  // receiver d, donor a
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (ia[k] >= 0 && qa[k] != qa0[k]) {  // a pair's quotas change together (sum is kept)
      st.quota[ia[k]] = qa[k];
      st.quota[id[k]] = qd[k];
    }
  }
}

// Stage 4: quota repair (DESIGN §4.4, circle method) on side warps 0 .. repair_warps - 1 of
// num_side_warps (the CTA's warps 1 .. while warp 0 colours, or all of them): one warp per pair
// of a phase (the pairs of a phase are disjoint), the repair warps meet at named barrier 1 after
// every phase.
__device__ __forceinline__ void repair(const State& st, int B, int side_warp, int num_side_warps,
                                       int lane) {
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
        trade(st, B, a, d, lane);
        __syncwarp();
        trade(st, B, d, a, lane);
      }
    }
    named_barrier(1, repair_warps * 32);
  }
}

}  // namespace plan_detail

}  // namespace iser::cuda
