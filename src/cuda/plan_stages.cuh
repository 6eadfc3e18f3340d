// Device stages of the HALO-Q planner kernel (plan.cuh): configuration, the shared-memory layout,
// per-rank state and stages 1-4 (hist and candidates, placement, coloring, quota repair). Split
// from the kernel entry only to keep files short; see plan.cuh for the stage map and NOTEs.
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
  int hist, candidates, home_load, recv_used, send_used, next_candidate, frozen, prefix, share,
      used, load, expert_broadcast, b_expert, b_owner, b_level, b_begin, b_size, b_helper, b_mode,
      b_quota_offset, b_link, quota, buffer_words, order, own, left, spent, cold_prefix, scalars,
      total;

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
    s.recv_used = take(P);
    s.send_used = take(P);
    s.next_candidate = take(P);
    s.frozen = take(P);
    s.prefix = take(P + 1);
    s.share = take(P);
    s.used = take(P);
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
    s.left = take(iser ? E : 0);             // iser: routes of each expert its owner still computes
    s.spent = take(iser ? E : 0);            // iser: expert found no room (skipped for this owner)
    s.cold_prefix = take(iser ? P + 1 : 0);  // iser: prefix of cold ranks (load < water)
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

__device__ __forceinline__ int warp_inclusive_scan(int v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
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
  constexpr int kUnroll = kVec == 4 ? 4 : 1;  // loads in flight on the fast path only
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
  int32_t* recv_used;
  int32_t* send_used;
  int32_t* next_candidate;
  int32_t* frozen;
  uint32_t* prefix;  // packed (room << 7) | ineligible, inclusive prefix over ranks
  int32_t* share;    // placement scratch: the quota of each group member in this pass
  uint32_t* used;    // helper indices in use per rank (coloring)
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
  int32_t* left;          // iser: [E] routes the owner still computes
  int32_t* spent;         // iser: [E] 1 when no group had room for the expert
  uint32_t* cold_prefix;  // iser: [P + 1] inclusive prefix of cold ranks
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

// Stage 2: packed inclusive prefix over ranks of room = max(0, T - L) (owner excluded) and of
// "no free helper slot" into prefix[1..P]; Σ room <= P * T < 2^25 and Σ flags <= 72 < 2^7, so it
// fits 32 bits. The K chunks of 32 ranks are scanned together (one scan's latency).
template <int K>
__device__ __forceinline__ void room_prefix(const State& st, int o, int T, int lane) {
  unsigned v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = 32 * k + lane;
    v[k] = 0;
    if (r < st.P) {
      const int l = st.load[r];
      const unsigned room = (r != o && l < T) ? static_cast<unsigned>(T - l) : 0u;
      v[k] = (room << 7) | (st.recv_used[r] >= st.S ? 1u : 0u);
    }
  }
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const unsigned n = __shfl_up_sync(PlanConfig::kFullMask, v[k], d);
      if (lane >= d) v[k] += n;
    }
  }
  unsigned carry = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = 32 * k + lane;
    if (r < st.P) st.prefix[r + 1] = carry + v[k];
    if (k + 1 < K) carry += __shfl_sync(PlanConfig::kFullMask, v[k], 31);
  }
}

struct GroupChoice {
  int level = -1;
  int begin = 0;
};

// Stage 2 group search for owner o (warp 0). Reference: the finest level <= wanted (group size
// * T >= mass) whose best eligible group has room > 0; best = most room, ties lowest begin.
// absorb: a level is taken at once only if its best room >= give, otherwise the group with the
// most room over all levels (ties: the finer level, then the lowest begin) if room > 0.
__device__ GroupChoice choose_group(const State& st, const PlanParams& p, int o, int T, int mass,
                                    int give, int lane) {
  const int P = st.P;
  if (lane == 0) st.prefix[0] = 0;
  if (P <= 32) {
    room_prefix<1>(st, o, T, lane);
  } else {
    room_prefix<PlanConfig::kRankChunks>(st, o, T, lane);
  }
  __syncwarp();

  const long long per_member = T > 1 ? T : 1;
  const int num_flat = (1 << st.num_levels) - 1;
  // One evaluation of every group (flat index f = 2^level - 1 + group index, <= 4 per lane) and
  // two lexicographic warp maxima, each as a (hi, lo) pair of 32-bit reductions:
  //   accepted (room > 0, and room >= give under absorb): (level + 1, room, -group)
  //   absorb fallback (room > 0):                          (room, level, -group)
  unsigned acc_hi = 0, acc_lo = 0, any_hi = 0, any_lo = 0;
#pragma unroll 1
  for (int f = lane; f < num_flat; f += 32) {
    const int level = 31 - __clz(f + 1);
    const int group = f + 1 - (1 << level);
    const int size = P >> level;
    const int begin = group * size;
    if (static_cast<long long>(size) * per_member < mass) continue;  // finer than wanted
    if (p.owner_in_group && (o < begin || o >= begin + size)) continue;
    const unsigned sum = st.prefix[begin + size] - st.prefix[begin];
    if ((sum & 127u) != 0) continue;  // a member has no free helper slot
    const unsigned room = sum >> 7;
    if (room == 0) continue;
    const unsigned tie = 127u - static_cast<unsigned>(group);
    if (!p.absorb || room >= static_cast<unsigned>(give)) {
      const unsigned hi = static_cast<unsigned>(level + 1);
      const unsigned lo = (room << 7) | tie;
      if (hi > acc_hi || (hi == acc_hi && lo > acc_lo)) acc_hi = hi, acc_lo = lo;
    }
    const unsigned lo = (static_cast<unsigned>(level) << 7) | tie;
    if (room > any_hi || (room == any_hi && lo > any_lo)) any_hi = room, any_lo = lo;
  }
  GroupChoice choice;
  const unsigned best_level = __reduce_max_sync(PlanConfig::kFullMask, acc_hi);
  if (best_level > 0) {
    const unsigned key =
        __reduce_max_sync(PlanConfig::kFullMask, acc_hi == best_level ? acc_lo : 0u);
    choice.level = static_cast<int>(best_level) - 1;
    choice.begin = (127 - static_cast<int>(key & 127u)) * (P >> choice.level);
    return choice;
  }
  if (!p.absorb) return choice;
  const unsigned best_room = __reduce_max_sync(PlanConfig::kFullMask, any_hi);
  if (best_room == 0) return choice;
  const unsigned key = __reduce_max_sync(PlanConfig::kFullMask, any_hi == best_room ? any_lo : 0u);
  choice.level = static_cast<int>(key >> 7);
  choice.begin = (127 - static_cast<int>(key & 127u)) * (P >> choice.level);
  return choice;
}

// Stage 2: placement (warp 0). Returns the number of broadcasts; sets status bits on overflow.
__device__ int place(const State& st, const PlanParams& p, int T, int lane) {
  const int P = st.P;
  const int S = st.S;
  const int C = st.C;
  int num_broadcasts = 0;
  int quota_used = 0;
  const int max_passes = P * (C + 2);
  for (int pass = 0; pass < max_passes; ++pass) {
    __syncwarp();
    // Owner: the non-frozen rank with the largest L above T, ties to the lowest rank. L < 2^25.
    unsigned key = 0;
#pragma unroll 1
    for (int r = lane; r < P; r += 32) {
      const int l = st.load[r];
      if (!st.frozen[r] && l > T) key = max(key, (static_cast<unsigned>(l) << 7) | (127u - r));
    }
    key = __reduce_max_sync(PlanConfig::kFullMask, key);
    if (key == 0) break;
    const int o = 127 - static_cast<int>(key & 127u);
    const int load_o = static_cast<int>(key >> 7);
    const int cursor = st.next_candidate[o];
    bool freeze = st.send_used[o] >= S || cursor >= C;
    int expert = -1;
    int mass = 0;
    int give = 0;
    if (!freeze) {
      expert = st.candidates[o * C + cursor];
      mass = st.hist[expert];
      __syncwarp();
      if (lane == 0) st.next_candidate[o] = cursor + 1;  // advances even if this attempt fails
      give = min(load_o - T, mass);
      freeze = mass == 0 || give <= 0;
    }
    GroupChoice g;
    if (!freeze) {
      g = choose_group(st, p, o, T, mass, give, lane);
      freeze = g.level < 0;
    }
    if (freeze) {
      __syncwarp();
      if (lane == 0) st.frozen[o] = 1;
      continue;
    }

    // Quotas: members other than the owner, coldest first by (L, rank) before this step, each
    // take min(T - L, what is left of give). Member i's share = clamp(give - Σ caps of the
    // members colder than it, 0, its cap).
    const int size = P >> g.level;
    int moved = 0;
#pragma unroll 1
    for (int i = lane; i < size; i += 32) {
      const int m = g.begin + i;
      const int lm = st.load[m];
      int take = 0;
      if (m != o && lm < T) {
        int before = 0;
#pragma unroll 4
        for (int j = 0; j < size; ++j) {
          const int m2 = g.begin + j;
          const int l2 = st.load[m2];
          if (m2 != o && l2 < T && (l2 < lm || (l2 == lm && m2 < m))) before += T - l2;
        }
        take = min(T - lm, max(0, give - before));
      }
      st.share[i] = take;
      moved += take;
    }
    moved = __reduce_add_sync(PlanConfig::kFullMask, moved);
    if (moved <= 0) {
      __syncwarp();
      if (lane == 0) st.frozen[o] = 1;
      continue;
    }
    if (moved < p.min_move) continue;  // variant: skipped, not frozen (cursor has advanced)

    const bool owner_in = o >= g.begin && o < g.begin + size;
    const int entries = size + (owner_in ? 0 : 1);
    if (num_broadcasts >= st.max_broadcasts || quota_used + entries > st.quota_cap) {
      if (lane == 0)
        atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), kGpuPlanOverflow);
      break;
    }
    const int offset = quota_used;
    __syncwarp();
#pragma unroll 1
    for (int i = lane; i < size; i += 32) {  // each lane reads back only its own shares
      const int m = g.begin + i;
      const int take = st.share[i];
      st.quota[offset + i] = m == o ? mass - moved : take;
      st.recv_used[m] += 1;
      if (m != o) st.load[m] += take;  // lane 0 updates the owner below
    }
    if (lane == 0) {
      if (!owner_in) st.quota[offset + size] = mass - moved;
      st.send_used[o] += 1;
      st.load[o] -= moved;
      const int b = num_broadcasts;
      st.b_expert[b] = expert;
      st.b_owner[b] = o;
      st.b_level[b] = g.level;
      st.b_begin[b] = g.begin;
      st.b_size[b] = size;
      st.b_quota_offset[b] = offset;
      st.expert_broadcast[expert] = b;
    }
    ++num_broadcasts;
    quota_used += entries;
  }
  __syncwarp();
  return num_broadcasts;
}

// Stage 3: slot coloring (warp 0): levels coarse to fine, plan order within a level, the
// smallest helper index free on every member. NOTE: aligned groups nest, so when every rank is
// in at most S groups a free index always exists; a failure is an internal error.
__device__ void color(const State& st, int num_broadcasts, int lane) {
#pragma unroll 1
  for (int r = lane; r < st.P; r += 32) st.used[r] = 0;
  __syncwarp();
  const unsigned all = (1u << st.S) - 1u;
#pragma unroll 1
  for (int level = 0; level < st.num_levels; ++level) {
#pragma unroll 1
    for (int base = 0; base < num_broadcasts; base += 32) {
      const int k = base + lane;
      unsigned pending =
          __ballot_sync(PlanConfig::kFullMask, k < num_broadcasts && st.b_level[k] == level);
      while (pending != 0) {
        const int b = base + __ffs(pending) - 1;
        pending &= pending - 1;
        const int begin = st.b_begin[b];
        const int size = st.b_size[b];
        unsigned mask = 0;
#pragma unroll 1
        for (int i = lane; i < size; i += 32) mask |= st.used[begin + i];
        mask = __reduce_or_sync(PlanConfig::kFullMask, mask);
        const unsigned free = ~mask & all;
        int h = 0;
        if (free == 0) {
          if (lane == 0)
            atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), kGpuColoringFailed);
        } else {
          h = __ffs(free) - 1;
        }
        __syncwarp();
#pragma unroll 1
        for (int i = lane; i < size; i += 32) st.used[begin + i] |= 1u << h;
        if (lane == 0) st.b_helper[b] = h;
        __syncwarp();
      }
    }
  }
}

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
                                              const int (&c_d)[K], int (&q_d)[K], int lane) {
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
                                                     int a, int d, int lane) {
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
  trade_one_way(ca, qa, cd, qd, lane);  // receiver a, donor d
  trade_one_way(cd, qd, ca, qa, lane);  // receiver d, donor a
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (ia[k] >= 0 && qa[k] != qa0[k]) {  // a pair's quotas change together (sum is kept)
      st.quota[ia[k]] = qa[k];
      st.quota[id[k]] = qd[k];
    }
  }
}

}  // namespace plan_detail

}  // namespace iser::cuda
