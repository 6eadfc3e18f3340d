// Stages 2 and 3 of the planner kernel (plan.cuh) on warp 0: placement (docs/design.md §4.2 and the
// room-aware placement of plan_iser, src/core/planner/iser.cpp) and slot coloring (§4.3).
//
// NOTE: every pass is a chain of dependent steps on one warp, so its length is the kernel's
// cost (~0.9 us per broadcast on H200 at E = 384, S = 4). The per-rank state (load, received and
// sent broadcasts, HALO-Q's candidate cursor and the candidate under it, frozen) lives in
// registers: lane l holds ranks l, l + 32, l + 64 (K chunks, K = 1 for P <= 32), and every
// selection is a warp reduction or a shuffle. Shared memory is only written (broadcast records and
// quotas, for the later stages) or read where the data is per expert (hist, candidates, iser's
// shares). Arrays indexed by a rank stay indexed by compile-time chunk numbers, so they never spill
// to local memory.
//
// HALO-Q and the room-aware placement run the same loop (owner choice, quota fill, commit); they
// differ in the expert they export, the group search and what a failed attempt freezes.
#pragma once

#include "cuda/plan_stages.cuh"

namespace iser::cuda::plan_detail {

inline constexpr int kMaxLevels = 7;  // P <= 72 and g_min >= 1: groups of 64 .. 1 ranks

// v[k] for a chunk number k that is the same on every lane (a select, not an indexed access).
template <int K, typename T>
__device__ __forceinline__ T chunk(const T (&v)[K], int k) {
  T x = v[0];
#pragma unroll
  for (int i = 1; i < K; ++i) x = k == i ? v[i] : x;
  return x;
}

// The value rank r (the same on every lane) holds in v.
template <int K, typename T>
__device__ __forceinline__ T rank_value(const T (&v)[K], int r) {
  return __shfl_sync(PlanConfig::kFullMask, chunk<K>(v, r >> 5), r & 31);
}

// Inclusive prefix over ranks (rank order = chunk-major) of N register rows, scanned together.
// With one chunk (P <= 32) only the steps below P are needed: ceil(log2 P) shuffles deep.
template <int K, int N>
__device__ __forceinline__ void scan_ranks(unsigned (&v)[N][K], int P, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    if (K == 1 && d >= P) break;
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const unsigned x = __shfl_up_sync(PlanConfig::kFullMask, v[n][k], d);
        if (lane >= d) v[n][k] += x;
      }
    }
  }
#pragma unroll
  for (int k = 1; k < K; ++k) {
#pragma unroll
    for (int n = 0; n < N; ++n) v[n][k] += __shfl_sync(PlanConfig::kFullMask, v[n][k - 1], 31);
  }
}

// Inclusive prefix at rank `pos` (per lane; pos < 0 gives 0). Every lane must call it.
template <int K>
__device__ __forceinline__ unsigned prefix_at(const unsigned (&incl)[K], int pos) {
  unsigned out = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const unsigned x = __shfl_sync(PlanConfig::kFullMask, incl[k], pos & 31);
    out = (pos >> 5) == k ? x : out;
  }
  return out;
}

template <int K>
struct RankState {
  int load[K];
  int recv[K];    // helper slots received
  int sent[K];    // broadcasts exported
  int cursor[K];  // HALO-Q: next candidate
  int cand[K];    // HALO-Q: the candidate under the cursor (-1 past the list)
  int mass[K];    // HALO-Q: its hist
  bool frozen[K];

  // The state before the first pass: home loads, nothing sent or received, HALO-Q's first
  // candidates; lanes past the ranks frozen.
  __device__ __forceinline__ void init(const State& st, bool room_aware, int lane) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int r = 32 * k + lane;
      load[k] = r < st.P ? st.home_load[r] : 0;
      recv[k] = 0;
      sent[k] = 0;
      cursor[k] = 0;
      frozen[k] = r >= st.P;
      cand[k] = !room_aware && r < st.P && st.C > 0 ? st.candidates[r * st.C] : -1;
      mass[k] = 0;
    }
  }
};

struct GroupChoice {
  int level = -1;
  int begin = 0;
  int moved = 0;      // what the members take: min(give, room of the group)
  bool full = false;  // give >= room: every member fills up to the water (no ordering needed)
};

// Stage 2 group sums: an inclusive prefix over ranks of (room << 7 | no free helper slot) and
// of cold ranks (load < water), room = water - load for cold ranks. The owner (load > water)
// adds neither room nor a cold rank, which is why HALO-Q's "members other than the owner" needs
// no exclusion here and the prefix can be taken before the owner is known. Σ room <= P * water
// < 2^25 and P <= 72 < 2^7, so the packed sum fits 32 bits.
template <int K>
struct GroupSums {
  unsigned packed[K];
  unsigned cold[K];

  // with_cold = false (HALO-Q, which needs no cold counts) scans the packed row alone.
  __device__ __forceinline__ void scan(const RankState<K>& rs, int P, int S, int water,
                                       bool with_cold, int lane) {
    unsigned v[2][K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int r = 32 * k + lane;
      const int l = rs.load[k];
      const bool is_cold = r < P && l < water;
      v[0][k] = (is_cold ? static_cast<unsigned>(water - l) << 7 : 0u) |
                (r < P && rs.recv[k] >= S ? 1u : 0u);
      v[1][k] = is_cold ? 1u : 0u;
    }
    if (with_cold) {
      scan_ranks<K, 2>(v, P, lane);
#pragma unroll
      for (int k = 0; k < K; ++k) packed[k] = v[0][k], cold[k] = v[1][k];
    } else {
      unsigned w[1][K];
#pragma unroll
      for (int k = 0; k < K; ++k) w[0][k] = v[0][k];
      scan_ranks<K, 1>(w, P, lane);
#pragma unroll
      for (int k = 0; k < K; ++k) packed[k] = w[0][k], cold[k] = 0;
    }
  }
};

// The largest mass a group of `size` ranks is wanted for (docs/design.md §4.2: size >= ceil(mass /
// max(T, 1))): size * max(T, 1), clamped to int.
__device__ __forceinline__ int wanted_mass_limit(int size, int T) {
  const long long limit = static_cast<long long>(size) * (T > 1 ? T : 1);
  return limit > 0x7fffffffLL ? 0x7fffffff : static_cast<int>(limit);
}

// The (level, group) of flat index f = lane = 2^level - 1 + group, when all of them fit one
// warp (num_flat <= 32: every P <= 64 at the default g_min). Fixed for the whole placement, so
// the per-pass group search starts from the two prefix shuffles instead of the index arithmetic.
struct LaneGroup {
  int begin = 0;
  int end = 0;          // begin + size
  int mass_limit = -1;  // size * max(T, 1), clamped to int: wanted iff mass <= mass_limit
  unsigned tag = 0;     // level << 7 | (127 - group)

  __device__ __forceinline__ void make(const State& st, int T, int lane) {
    const int num_flat = (1 << st.num_levels) - 1;
    if (lane >= num_flat) return;
    const int level = 31 - __clz(lane + 1);
    const int group = lane + 1 - (1 << level);
    const int size = st.P >> level;
    begin = group * size;
    end = begin + size;
    mass_limit = wanted_mass_limit(size, T);
    tag = static_cast<unsigned>(level) << 7 | (127u - static_cast<unsigned>(group));
  }

  // This pass's room of the lane's group, 0 when a member has no free helper slot (or no group).
  template <int K>
  __device__ __forceinline__ unsigned room(const unsigned (&packed)[K]) const {
    const bool valid = end > 0;
    const unsigned sum =
        prefix_at<K>(packed, valid ? end - 1 : -1) - prefix_at<K>(packed, valid ? begin - 1 : -1);
    return (sum & 127u) != 0 ? 0u : sum >> 7;
  }
};

// choose_group (below) for num_flat <= 32, one group per lane: the rooms come from before the
// owner was known, so only the owner-dependent tests and one reduction follow the owner choice.
// NOTE: no short-circuit tests and only warp-uniform branches (plan_place_lanes.cuh: a divergent
// branch costs a reconvergence on the pass's chain). mass == 0 or give <= 0 accepts no group.
__device__ __forceinline__ GroupChoice choose_group_lane(const PlanParams& p, const LaneGroup& lg,
                                                         unsigned room, bool packed_key, int P,
                                                         int o, int mass, int give) {
  const bool owner_inside = o >= lg.begin && o < lg.end;
  const bool eligible = (mass != 0) & (give > 0) & (room > 0) & (mass <= lg.mass_limit) &
                        (!p.owner_in_group | owner_inside);
  const bool accepted = eligible & (!p.absorb | (room >= static_cast<unsigned>(give)));
  const unsigned level1 = (lg.tag >> 7) + 1;
  const unsigned tie = lg.tag & 127u;
  unsigned best_level;
  unsigned best;  // room << 7 | 127 - group of the chosen group
  if (packed_key) {
    const unsigned key =
        __reduce_max_sync(PlanConfig::kFullMask, accepted ? level1 << 29 | room << 7 | tie : 0u);
    best_level = key >> 29;
    best = key & ((1u << 29) - 1);
  } else {
    best_level = __reduce_max_sync(PlanConfig::kFullMask, accepted ? level1 : 0u);
    best = __reduce_max_sync(PlanConfig::kFullMask,
                             accepted && level1 == best_level ? room << 7 | tie : 0u);
  }
  int level = static_cast<int>(best_level) - 1;
  if (best_level == 0 && p.absorb) {  // absorb: the most room over all levels, ties finer
    const unsigned best_room = __reduce_max_sync(PlanConfig::kFullMask, eligible ? room : 0u);
    const unsigned tag = __reduce_max_sync(
        PlanConfig::kFullMask, eligible && room == best_room && best_room > 0 ? lg.tag : 0u);
    level = best_room > 0 ? static_cast<int>(tag >> 7) : -1;
    best = best_room << 7 | (tag & 127u);
  }
  GroupChoice choice;
  if (level < 0) return choice;
  const unsigned best_room = best >> 7;
  choice.level = level;
  choice.begin = (127 - static_cast<int>(best & 127u)) * (P >> level);
  choice.moved = static_cast<int>(min(best_room, static_cast<unsigned>(give)));
  choice.full = static_cast<unsigned>(give) >= best_room;
  return choice;
}

// Lane 0's record of committed broadcast b (its quotas are stored by the caller).
__device__ __forceinline__ void store_broadcast(const State& st, int b, int expert, int owner,
                                                int level, int begin, int size, int quota_offset) {
  st.b_expert[b] = expert;
  st.b_owner[b] = owner;
  st.b_level[b] = level;
  st.b_begin[b] = begin;
  st.b_size[b] = size;
  st.b_quota_offset[b] = quota_offset;
  st.expert_broadcast[expert] = b;
}

// True, with kGpuPlanOverflow set in the status word, when one more broadcast of `entries` quota
// entries does not fit the plan's arrays (the placement then stops).
__device__ __forceinline__ bool plan_overflows(const State& st, int num_broadcasts, int quota_used,
                                               int entries, int lane) {
  if (num_broadcasts < st.max_broadcasts && quota_used + entries <= st.quota_cap) return false;
  if (lane == 0) atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), kGpuPlanOverflow);
  return true;
}

// HALO-Q group search (reference, absorb, owner_in_group) for owner o: the finest level <= wanted
// (group size * T >= mass) whose best eligible group has room > 0; best = most room, ties lowest
// begin. absorb: a level is taken at once only if its best room >= give, otherwise the group
// with the most room over all levels (ties: the finer level, then the lowest begin) if room > 0.
// Eligible: every member (the owner too when it is one) has a free helper slot. Out of line:
// with the default g_min every P <= 64 takes choose_group_lane instead, and this loop's code
// would otherwise sit inside the pass loop (instruction fetches after an L2 flush). Everything
// by value: an argument by reference would move it (and the kernel's copy of p) to local memory
// for the whole pass loop.
template <int K>
__device__ __noinline__ GroupChoice choose_group(int P, int num_levels, bool absorb,
                                                 bool owner_in_group, const GroupSums<K> sums,
                                                 bool packed_key, int o, int T, int mass, int give,
                                                 int lane) {
  const long long per_member = T > 1 ? T : 1;
  const int num_flat = (1 << num_levels) - 1;
  // Every (level, group) once (flat index f = 2^level - 1 + group) and two lexicographic warp
  // maxima, each as a (hi, lo) pair of 32-bit reductions:
  //   accepted (room > 0, and room >= give under absorb): (level + 1, room, -group)
  //   absorb fallback (room > 0):                          (room, level, -group)
  // With packed_key (P * T < 2^22, so room < 2^22) the accepted key is one 32-bit word:
  // (level + 1) << 29 | room << 7 | 127 - group, a single reduction.
  unsigned acc_hi = 0, acc_lo = 0, any_hi = 0, any_lo = 0;
#pragma unroll 1
  for (int base = 0; base < num_flat; base += 32) {
    const int f = base + lane;
    const int level = 31 - __clz(f + 1);
    const int group = f + 1 - (1 << level);
    const int size = P >> level;
    const int begin = group * size;
    const bool valid = f < num_flat;
    const unsigned sum = prefix_at<K>(sums.packed, valid ? begin + size - 1 : -1) -
                         prefix_at<K>(sums.packed, valid ? begin - 1 : -1);
    if (!valid || static_cast<long long>(size) * per_member < mass) continue;  // finer than wanted
    if (owner_in_group && (o < begin || o >= begin + size)) continue;
    if ((sum & 127u) != 0) continue;  // a member has no free helper slot
    const unsigned room = sum >> 7;
    if (room == 0) continue;
    const unsigned tie = 127u - static_cast<unsigned>(group);
    if (!absorb || room >= static_cast<unsigned>(give)) {
      const unsigned hi = static_cast<unsigned>(level + 1);
      const unsigned lo = (room << 7) | tie;
      if (hi > acc_hi || (hi == acc_hi && lo > acc_lo)) acc_hi = hi, acc_lo = lo;
    }
    const unsigned lo = (static_cast<unsigned>(level) << 7) | tie;
    if (room > any_hi || (room == any_hi && lo > any_lo)) any_hi = room, any_lo = lo;
  }
  GroupChoice choice;
  unsigned best_level;
  unsigned key;
  if (packed_key) {
    key = __reduce_max_sync(PlanConfig::kFullMask, acc_hi << 29 | acc_lo);
    best_level = key >> 29;
  } else {
    best_level = __reduce_max_sync(PlanConfig::kFullMask, acc_hi);
    key = best_level > 0
              ? __reduce_max_sync(PlanConfig::kFullMask, acc_hi == best_level ? acc_lo : 0u)
              : 0u;
  }
  if (best_level > 0) {
    const unsigned room = packed_key ? (key >> 7) & ((1u << 22) - 1) : key >> 7;
    choice.level = static_cast<int>(best_level) - 1;
    choice.begin = (127 - static_cast<int>(key & 127u)) * (P >> choice.level);
    choice.moved = static_cast<int>(min(room, static_cast<unsigned>(give)));
    choice.full = static_cast<unsigned>(give) >= room;
    return choice;
  }
  if (!absorb) return choice;
  const unsigned best_room = __reduce_max_sync(PlanConfig::kFullMask, any_hi);
  if (best_room == 0) return choice;
  key = __reduce_max_sync(PlanConfig::kFullMask, any_hi == best_room ? any_lo : 0u);
  choice.level = static_cast<int>(key >> 7);
  choice.begin = (127 - static_cast<int>(key & 127u)) * (P >> choice.level);
  choice.moved = static_cast<int>(min(best_room, static_cast<unsigned>(give)));
  choice.full = static_cast<unsigned>(give) >= best_room;
  return choice;
}

// True if [begin, begin + size) meets the group of a broadcast of the chain starting at b
// (the expert's broadcasts, latest first, linked by b_link).
__device__ __forceinline__ bool meets_chain(const State& st, int b, int begin, int size) {
#pragma unroll 1
  for (; b >= 0; b = st.b_link[b]) {
    if (begin < st.b_begin[b] + st.b_size[b] && st.b_begin[b] < begin + size) return true;
  }
  return false;
}

// Room-aware group search (iser.cpp: tally_groups, best_group_at and the level rule) at water W:
// per level, the eligible group absorbing the most of give (min(room, give)); ties: fewer cold
// members, then the lowest group; groups meeting an earlier group of the expert (chain from
// `latest`) are skipped. Then the finest level absorbing >= 7/8 of the best level's amount.
// The owner (L > W) adds neither room nor a cold member, so it needs no exclusion. Levels below
// min_level are not searched (plan_iser's finest ladder searches the finest level only), nor is
// the group `left_out` (level -1: none; plan_iser's second-choice rungs).
template <int K>
__device__ GroupChoice choose_group_room_aware(const State& st, const GroupSums<K>& sums, int give,
                                               int latest, int min_level,
                                               const GroupChoice& left_out, int lane) {
  const int P = st.P;
  // Per lane and level: the best of the lane's groups as (absorbed, (127 - cold) << 7 | 127 - g).
  unsigned hi[kMaxLevels], lo[kMaxLevels];
#pragma unroll
  for (int l = 0; l < kMaxLevels; ++l) hi[l] = 0, lo[l] = 0;
  const int num_flat = (1 << st.num_levels) - 1;
#pragma unroll 1
  for (int base = 0; base < num_flat; base += 32) {
    const int f = base + lane;
    const int level = 31 - __clz(f + 1);
    const int group = f + 1 - (1 << level);
    const int size = P >> level;
    const int begin = group * size;
    const bool valid = f < num_flat;
    const int end_pos = valid ? begin + size - 1 : -1;
    const int begin_pos = valid ? begin - 1 : -1;
    const unsigned sum = prefix_at<K>(sums.packed, end_pos) - prefix_at<K>(sums.packed, begin_pos);
    const unsigned cold = prefix_at<K>(sums.cold, end_pos) - prefix_at<K>(sums.cold, begin_pos);
    // Not searched, or a member has no free helper slot.
    if (!valid || level < min_level || (sum & 127u) != 0) continue;
    if (level == left_out.level && begin == left_out.begin) continue;
    const unsigned room = sum >> 7;
    if (room == 0) continue;
    if (latest >= 0 && meets_chain(st, latest, begin, size)) continue;
    const unsigned a = min(room, static_cast<unsigned>(give));
    const unsigned key = ((127u - cold) << 7) | (127u - static_cast<unsigned>(group));
#pragma unroll
    for (int l = 0; l < kMaxLevels; ++l) {
      if (level == l && (a > hi[l] || (a == hi[l] && key > lo[l]))) hi[l] = a, lo[l] = key;
    }
  }
  // Independent reductions per level (pipelined), then the 7/8 rule from the finest level.
  unsigned best[kMaxLevels];
  unsigned best_absorbed = 0;
#pragma unroll
  for (int l = 0; l < kMaxLevels; ++l) {
    best[l] = l < st.num_levels ? __reduce_max_sync(PlanConfig::kFullMask, hi[l]) : 0u;
    best_absorbed = max(best_absorbed, best[l]);
  }
  GroupChoice g;
  if (best_absorbed == 0) return g;
  int level = st.num_levels - 1;
#pragma unroll 1
  for (; level > 0; --level) {
    const unsigned a = chunk<kMaxLevels>(best, level);
    if (a > 0 && static_cast<unsigned long long>(a) * 8 >= best_absorbed * 7ULL) break;
  }
  const unsigned a = chunk<kMaxLevels>(best, level);
  const unsigned key = __reduce_max_sync(
      PlanConfig::kFullMask, chunk<kMaxLevels>(hi, level) == a ? chunk<kMaxLevels>(lo, level) : 0u);
  g.level = level;
  g.begin = (127 - static_cast<int>(key & 127u)) * (P >> level);
  g.moved = static_cast<int>(a);  // min(room, give)
  g.full = a < static_cast<unsigned>(give);
  return g;
}

// The group of a room-aware pass: choose_group_room_aware from min_level; with `second` (the
// second-choice form's first broadcast) the search again with that group left out, taken where it
// finds a group with room. One call site (code size is instruction-fetch time here).
template <int K>
__device__ __forceinline__ GroupChoice room_aware_group(const State& st, const GroupSums<K>& sums,
                                                        int give, int latest, int min_level,
                                                        bool second, int lane) {
  GroupChoice g;
  GroupChoice left_out;
#pragma unroll 1
  for (int attempt = 0; attempt < 2; ++attempt) {
    const GroupChoice c =
        choose_group_room_aware<K>(st, sums, give, latest, min_level, left_out, lane);
    if (attempt == 0 || c.level >= 0) g = c;
    if (!second || g.level < 0 || attempt == 1) break;
    left_out = g;
  }
  return g;
}

// Room-aware placement's expert of owner o: the largest share left[] among its home experts not
// spent, returned (0: none); best_v / best_i: the lane's own best (ties to the smaller id).
__device__ __forceinline__ unsigned largest_share(const State& st, int o, int H, int lane,
                                                  unsigned& best_v, int& best_i) {
#pragma unroll 1
  for (int i = lane; i < H; i += 32) {  // ascending i: a strict > keeps the lowest id
    const int x = o * H + i;
    const int left = st.left[x];
    if (!st.spent[x] && left > 0 && static_cast<unsigned>(left) > best_v) {
      best_v = static_cast<unsigned>(left), best_i = i;
    }
  }
  return __reduce_max_sync(PlanConfig::kFullMask, best_v);
}

// Quotas of a place_ranks pass: members other than the owner, coldest first by (L, rank) before
// this step, each take min(water - L, what is left of give): member m takes clamp(give - Σ caps
// of the members colder than m, 0, its cap). With give >= room (full) every member takes its
// cap. Otherwise each lane computes its own ranks' shares from every member's (L << 7 | rank)
// (L < 2^25) and cap, the cap 0 for non-members.
template <int K>
__device__ __forceinline__ void fill_takes(const RankState<K>& rs, int P, int o, int water,
                                           int give, int begin, int size, bool full, int lane,
                                           int (&take)[K]) {
  int cap[K];
  unsigned order[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = 32 * k + lane;
    const int l = rs.load[k];
    const bool member = r >= begin && r < begin + size && r != o && l < water;
    cap[k] = member ? water - l : 0;
    order[k] = static_cast<unsigned>(l) << 7 | static_cast<unsigned>(r);
  }
  if (full) {
#pragma unroll
    for (int k = 0; k < K; ++k) take[k] = cap[k];
    return;
  }
  int before[K];
#pragma unroll
  for (int k = 0; k < K; ++k) before[k] = 0;
#pragma unroll 4
  for (int j = 0; j < size; ++j) {
    const int m2 = begin + j;
    const unsigned order2 = rank_value<K>(order, m2);
    const int cap2 = rank_value<K>(cap, m2);
#pragma unroll
    for (int k = 0; k < K; ++k) before[k] += order2 < order[k] ? cap2 : 0;
  }
#pragma unroll
  for (int k = 0; k < K; ++k) take[k] = min(cap[k], max(0, give - before[k]));
}

// A place_ranks commit: the members' quotas (the owner's is owner_quota) at quota offset, every
// member (the owner too) receives a helper slot and its take, the owner exports `moved`.
template <int K>
__device__ __forceinline__ void commit_ranks(const State& st, RankState<K>& rs,
                                             const int (&take)[K], int o, int begin, int size,
                                             int moved, int owner_quota, int offset, int lane) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = 32 * k + lane;
    if (r >= begin && r < begin + size) {
      st.quota[offset + r - begin] = r == o ? owner_quota : take[k];
      rs.recv[k] += 1;
      rs.load[k] += take[k];
    }
    if (r == o) {
      rs.sent[k] += 1;
      rs.load[k] -= moved;
    }
  }
}

// Room-aware placement: `expert` is spent (no group had room for it). NOTE: every lane has read
// spent[] this pass before lane 0 writes it (write after read); the second barrier publishes it
// to the next pass's expert choice.
__device__ __forceinline__ void mark_spent(const State& st, int expert, int lane) {
  __syncwarp();
  if (lane == 0) st.spent[expert] = 1;
  __syncwarp();
}

// A placement pass's owner as a key (0: none), the same in every lane: the non-frozen rank with
// the largest L above the water, ties to the lowest rank; L < 2^25, so (L << 7 | 127 - r) fits
// 32 bits. Breadth-first (room-aware only): among the ranks with the fewest broadcasts sent so
// far, found by a first reduction (the key has no room for the count).
template <int K>
__device__ __forceinline__ unsigned owner_key(const RankState<K>& rs, int S, int C, int water,
                                              bool room_aware, bool breadth_first, int lane) {
  int fewest = 0;
  if (breadth_first) {
    int mine = S;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const bool alive = !rs.frozen[k] && rs.sent[k] < S;
      if (alive && rs.load[k] > water) mine = min(mine, rs.sent[k]);
    }
    fewest = __reduce_min_sync(PlanConfig::kFullMask, mine);
  }
  unsigned key = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int l = rs.load[k];
    const unsigned r = static_cast<unsigned>(32 * k + lane);
    const bool alive = !rs.frozen[k] && rs.sent[k] < S && (room_aware || rs.cursor[k] < C) &&
                       (!breadth_first || rs.sent[k] == fewest);
    if (alive && l > water) key = max(key, (static_cast<unsigned>(l) << 7) | (127u - r));
  }
  return __reduce_max_sync(PlanConfig::kFullMask, key);
}

// Placement on warp 0; returns the number of broadcasts and leaves the final loads in st.load.
// HALO-Q (room_aware = false, water = T): candidates fixed up front, a failed attempt freezes the
// owner. Room-aware (water = W >= T): the home expert with the largest share left, a failed
// attempt marks the expert spent. Sets status bits on overflow.
// NOTE: when no eligible group has room for an expert not exported yet, none has for any other
// expert of the owner (only an exported expert's own groups are skipped), so the owner is frozen
// at once, as place_room_aware does, instead of spending its experts one pass each (up to H
// passes that change nothing else: 74 → 6 passes over the CPU's candidates at EP4 on real data).
//
// NOTE: a rank that would be frozen at once when chosen (HALO-Q: no export or candidate left;
// both: no export left) is left out of the owner choice instead: such a pass changes nothing
// but the rank's frozen bit (its load is above the water, so it receives nothing meanwhile), and
// the pass budget never binds (a pass freezes a rank, advances a cursor / spends an expert, or
// commits a broadcast), so the plan is the same with fewer passes.
template <int K>
__device__ __forceinline__ int place_ranks(const State& st, const PlanParams& p, int T, int water,
                                           bool room_aware, int lane, bool breadth_first = false,
                                           bool finest_only = false, bool second_choice = false) {
  const int P = st.P;
  const int S = st.S;
  const int C = st.C;
  const int H = st.H;
  RankState<K> rs;
  rs.init(st, room_aware, lane);
  // One group per lane for the HALO-Q group search when they fit a warp (see LaneGroup).
  const bool lane_groups = !room_aware && (1 << st.num_levels) - 1 <= 32;
  LaneGroup lg;
  if (lane_groups) lg.make(st, water, lane);
  int num_broadcasts = 0;
  int quota_used = 0;
  const int max_passes = room_aware ? P * (H + S + 1) + 1 : P * (C + 2);
  const bool packed_key = static_cast<long long>(P) * water < (1 << 22);
#pragma unroll 1
  for (int pass = 0; pass < max_passes; ++pass) {
    // HALO-Q: the candidates' masses (the owner's cursor moved last pass); the loads are long
    // done and the values are needed only after the owner choice.
    if (!room_aware) {
#pragma unroll
      for (int k = 0; k < K; ++k) rs.mass[k] = rs.cand[k] >= 0 ? st.hist[rs.cand[k]] : 0;
    }
    const unsigned key = owner_key<K>(rs, S, C, water, room_aware, breadth_first, lane);
    // The group sums (and HALO-Q's rooms per lane group) between the reduction and its first
    // use: the scan's shuffles run while the reduction is in flight.
    GroupSums<K> sums;
    sums.scan(rs, P, S, water, room_aware, lane);
    const unsigned lane_room = lane_groups ? lg.room<K>(sums.packed) : 0u;
    if (key == 0) break;
    const int o = 127 - static_cast<int>(key & 127u);
    const int load_o = static_cast<int>(key >> 7);
    const int o_chunk = o >> 5;
    const int o_lane = o & 31;
    const bool is_owner_lane = lane == o_lane;
    int expert = -1;
    int mass = 0;
    int give = 0;
    int latest = -1;
    bool freeze = false;
    GroupChoice g;
    if (!room_aware) {
      expert = __shfl_sync(PlanConfig::kFullMask, chunk<K>(rs.cand, o_chunk), o_lane);
      mass = __shfl_sync(PlanConfig::kFullMask, chunk<K>(rs.mass, o_chunk), o_lane);
      // The cursor advances even if this attempt fails; the next candidate is fetched now,
      // and its mass at the start of a later pass.
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (!is_owner_lane || k != o_chunk) continue;
        const int next = rs.cursor[k] + 1;
        rs.cursor[k] = next;
        rs.cand[k] = next < C ? st.candidates[o * C + next] : -1;
      }
      give = min(load_o - water, mass);
      freeze = mass == 0 || give <= 0;
      if (!freeze) {
        g = lane_groups ? choose_group_lane(p, lg, lane_room, packed_key, P, o, mass, give)
                        : choose_group<K>(P, st.num_levels, p.absorb, p.owner_in_group, sums,
                                          packed_key, o, water, mass, give, lane);
        freeze = g.level < 0;
      }
    } else {
      // Expert: the home expert with the largest share left, not spent; ties to the smaller id.
      unsigned best_v = 0;
      int best_i = H;
      const unsigned share = largest_share(st, o, H, lane, best_v, best_i);
      freeze = share == 0;
      if (!freeze) {
        expert = o * H + __reduce_min_sync(PlanConfig::kFullMask, best_v == share ? best_i : H);
        mass = static_cast<int>(share);
        give = min(load_o - water, mass);
        latest = st.expert_broadcast[expert];
        g = room_aware_group<K>(st, sums, give, latest, finest_only ? st.num_levels - 1 : 0,
                                second_choice && num_broadcasts == 0, lane);
        // No room for an expert not exported yet: none for any of o's (see above); o freezes.
        freeze = g.level < 0 && latest < 0;
        if (g.level < 0 && !freeze) {
          mark_spent(st, expert, lane);
          continue;
        }
      }
    }
    if (freeze) {
#pragma unroll
      for (int k = 0; k < K; ++k) rs.frozen[k] = rs.frozen[k] || (is_owner_lane && k == o_chunk);
      continue;
    }
    // The members take moved = min(give, room) in all (a coldest-first fill, below).
    const int moved = g.moved;
    if (moved <= 0 || (room_aware && moved < p.min_move)) {
      if (room_aware) {
        mark_spent(st, expert, lane);
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) rs.frozen[k] = rs.frozen[k] || (is_owner_lane && k == o_chunk);
      }
      continue;
    }
    if (moved < p.min_move) continue;  // HALO-Q variant: skipped, not frozen (cursor advanced)

    const int size = P >> g.level;
    const int begin = g.begin;
    int take[K];
    fill_takes<K>(rs, P, o, water, give, begin, size, g.full, lane, take);
    const bool owner_in = o >= begin && o < begin + size;
    const int entries = size + (owner_in ? 0 : 1);
    if (plan_overflows(st, num_broadcasts, quota_used, entries, lane)) break;
    // HALO-Q: the owner keeps mass - moved. Room-aware: the owner's remaining share moves to
    // this broadcast; an earlier one of the expert keeps 0 for it.
    const int owner_quota = mass - moved;
    const int offset = quota_used;
    commit_ranks<K>(st, rs, take, o, begin, size, moved, owner_quota, offset, lane);
    // Room-aware: every lane has read left[] and expert_broadcast[] this pass before lane 0
    // rewrites them (write after read).
    if (room_aware) __syncwarp();
    if (lane == 0) {
      if (!owner_in) st.quota[offset + size] = owner_quota;
      const int b = num_broadcasts;
      store_broadcast(st, b, expert, o, g.level, begin, size, offset);
      if (room_aware) {
        if (latest >= 0) st.quota[st.host_index(latest, o)] = 0;
        st.left[expert] = owner_quota;
        st.b_link[b] = latest;
      }
    }
    ++num_broadcasts;
    quota_used += entries;
    // Room-aware passes read the records and the expert's share back; HALO-Q passes read
    // nothing placement writes.
    if (room_aware) __syncwarp();
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = 32 * k + lane;
    if (r < P) st.load[r] = rs.load[k];
  }
  __syncwarp();
  return num_broadcasts;
}

// NOTE: iser plans up to three candidates: one out-of-line copy per K serves all of them (code
// size is instruction-fetch time here). State and PlanParams go by value so that they stay in
// registers (by reference they would live in local memory, reloaded after every shared store).
template <int K>
__device__ __noinline__ int place_ranks_out_of_line(const State st, const PlanParams p, int T,
                                                    int water, bool room_aware, int lane,
                                                    bool breadth_first, bool finest_only,
                                                    bool second_choice) {
  return place_ranks<K>(st, p, T, water, room_aware, lane, breadth_first, finest_only,
                        second_choice);
}

// Placement entry of plan_iser's candidates (warp 0): HALO-Q at T, or room-aware at water W
// (breadth-first: owners with the fewest broadcasts sent first; finest_only: the finest level's
// groups only; second_choice: the first broadcast in the group chosen with the rule's own choice
// left out, where one has room).
__device__ __forceinline__ int place(const State& st, const PlanParams& p, int T, int water,
                                     bool room_aware, int lane, bool breadth_first = false,
                                     bool finest_only = false, bool second_choice = false) {
  return st.P <= 32
             ? place_ranks_out_of_line<1>(st, p, T, water, room_aware, lane, breadth_first,
                                          finest_only, second_choice)
             : place_ranks_out_of_line<PlanConfig::kRankChunks>(
                   st, p, T, water, room_aware, lane, breadth_first, finest_only, second_choice);
}

// Stage 3: slot coloring (warp 0): levels coarse to fine, plan order within a level, the
// smallest helper index free on every member. NOTE: aligned groups nest, so when every rank is
// in at most S groups a free index always exists; a failure is an internal error. The used
// helper indices of rank r sit in lane r % 32 (chunk r / 32).
template <int K>
inline __device__ void color_ranks(const State& st, int num_broadcasts, int lane) {
  unsigned used[K];
#pragma unroll
  for (int k = 0; k < K; ++k) used[k] = 0;
  const unsigned all = (1u << st.S) - 1u;
#pragma unroll 1
  for (int level = 0; level < st.num_levels; ++level) {
#pragma unroll 1
    for (int base = 0; base < num_broadcasts; base += 32) {
      const int b_lane = base + lane;
      const bool valid = b_lane < num_broadcasts;
      const int my_level = valid ? st.b_level[b_lane] : -1;
      const int my_begin = valid ? st.b_begin[b_lane] : 0;
      const int my_size = valid ? st.b_size[b_lane] : 0;
      unsigned pending = __ballot_sync(PlanConfig::kFullMask, my_level == level);
      while (pending != 0) {
        const int j = __ffs(pending) - 1;
        pending &= pending - 1;
        const int begin = __shfl_sync(PlanConfig::kFullMask, my_begin, j);
        const int size = __shfl_sync(PlanConfig::kFullMask, my_size, j);
        unsigned mask = 0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int r = 32 * k + lane;
          if (r >= begin && r < begin + size) mask |= used[k];
        }
        mask = __reduce_or_sync(PlanConfig::kFullMask, mask);
        const unsigned free = ~mask & all;
        int h = 0;
        if (free == 0) {
          if (lane == 0)
            atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), kGpuColoringFailed);
        } else {
          h = __ffs(free) - 1;
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int r = 32 * k + lane;
          if (r >= begin && r < begin + size) used[k] |= 1u << h;
        }
        if (lane == j) st.b_helper[base + j] = h;
      }
    }
  }
  __syncwarp();
}

__device__ __forceinline__ void color(const State& st, int num_broadcasts, int lane) {
  if (st.P <= 32) {
    color_ranks<1>(st, num_broadcasts, lane);
  } else {
    color_ranks<PlanConfig::kRankChunks>(st, num_broadcasts, lane);
  }
}

}  // namespace iser::cuda::plan_detail
