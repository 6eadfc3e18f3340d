// The `iser` policy's placement on the GPU (issue 10), bit-exact with plan_iser of the CPU
// (src/core/planner/iser.cpp) without a previous plan: three candidate placements, the best kept
// (lowest max load; ties: fewer remote copies, then the earlier candidate):
//   1. room-aware placement at water level T,
//   2. HALO-Q's placement (plan_detail::place with absorb and owner_in_group off),
//   3. only when the best so far ends above T + T/64: room-aware placement at T + T/64.
// Candidates live in two blocks of the shared arrays (PlanSmem::buffer_words apart): the kept
// one (block 0, where the later stages read the plan) and the challenger (block 1, copied over
// block 0 when it wins).
//
// Included by plan.cuh after plan_detail::place and before the kernel (it uses State, place and
// the warp helpers defined there). All of it runs on warp 0.
#pragma once

#include "cuda/plan_stages.cuh"

namespace iser::cuda::plan_detail {

// Room-aware scans: prefix[r + 1] = Σ_{r' <= r} (room << 7 | no free helper slot), room =
// max(0, W - L); cold_prefix[r + 1] = Σ (L < W). The owner (L > W) adds neither room nor a cold
// rank, as on the CPU, so it needs no exclusion. Same bit budget as room_prefix.
template <int K>
__device__ __forceinline__ void water_prefix(const State& st, int W, int lane) {
  unsigned v[K];
  unsigned c[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = 32 * k + lane;
    v[k] = 0;
    c[k] = 0;
    if (r < st.P) {
      const int l = st.load[r];
      const unsigned room = l < W ? static_cast<unsigned>(W - l) : 0u;
      v[k] = (room << 7) | (st.recv_used[r] >= st.S ? 1u : 0u);
      c[k] = l < W ? 1u : 0u;
    }
  }
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const unsigned nv = __shfl_up_sync(PlanConfig::kFullMask, v[k], d);
      const unsigned nc = __shfl_up_sync(PlanConfig::kFullMask, c[k], d);
      if (lane >= d) {
        v[k] += nv;
        c[k] += nc;
      }
    }
  }
  unsigned carry_v = 0;
  unsigned carry_c = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = 32 * k + lane;
    if (r < st.P) {
      st.prefix[r + 1] = carry_v + v[k];
      st.cold_prefix[r + 1] = carry_c + c[k];
    }
    if (k + 1 < K) {
      carry_v += __shfl_sync(PlanConfig::kFullMask, v[k], 31);
      carry_c += __shfl_sync(PlanConfig::kFullMask, c[k], 31);
    }
  }
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

// Fresh state of one candidate placement in st's block (warp 0).
__device__ void start_candidate(const State& st, bool room_aware, int lane) {
  __syncwarp();
#pragma unroll 1
  for (int r = lane; r < st.P; r += 32) {
    st.load[r] = st.home_load[r];
    st.recv_used[r] = 0;
    st.send_used[r] = 0;
    st.next_candidate[r] = 0;
    st.frozen[r] = 0;
  }
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

// Room-aware placement (CPU: place_room_aware) with water level W >= T; returns the number of
// broadcasts. expert_broadcast[e] is the latest broadcast of e (the CPU's `latest`).
__device__ int place_room_aware(const State& st, const PlanParams& p, int W, int lane) {
  const int P = st.P;
  const int S = st.S;
  const int H = st.H;
  int num_broadcasts = 0;
  int quota_used = 0;
  const int max_passes = P * (H + S + 1) + 1;
#pragma unroll 1
  for (int pass = 0; pass < max_passes; ++pass) {
    __syncwarp();
    // Owner: the non-frozen rank with the largest L above W, ties to the lowest rank. L < 2^25.
    unsigned key = 0;
#pragma unroll 1
    for (int r = lane; r < P; r += 32) {
      const int l = st.load[r];
      if (!st.frozen[r] && l > W) key = max(key, (static_cast<unsigned>(l) << 7) | (127u - r));
    }
    key = __reduce_max_sync(PlanConfig::kFullMask, key);
    if (key == 0) break;
    const int o = 127 - static_cast<int>(key & 127u);
    const int load_o = static_cast<int>(key >> 7);
    if (st.send_used[o] >= S) {
      __syncwarp();
      if (lane == 0) st.frozen[o] = 1;
      continue;
    }
    // Expert: the home expert with the largest share left, not spent; ties to the smaller id.
    unsigned best_v = 0;
    int best_i = H;
#pragma unroll 1
    for (int i = lane; i < H; i += 32) {  // ascending i: a strict > keeps the lowest id
      const int x = o * H + i;
      const unsigned v = static_cast<unsigned>(st.left[x]);
      if (!st.spent[x] && st.left[x] > 0 && v > best_v) best_v = v, best_i = i;
    }
    const unsigned share = __reduce_max_sync(PlanConfig::kFullMask, best_v);
    if (share == 0) {
      __syncwarp();
      if (lane == 0) st.frozen[o] = 1;
      continue;
    }
    const int e = o * H + __reduce_min_sync(PlanConfig::kFullMask, best_v == share ? best_i : H);
    const int give = min(load_o - W, static_cast<int>(share));
    const int latest = st.expert_broadcast[e];

    // Per level, the eligible group absorbing the most (min(room, give)); ties: fewer cold
    // members, then the lowest group; groups meeting an earlier group of e are skipped.
    if (lane == 0) {
      st.prefix[0] = 0;
      st.cold_prefix[0] = 0;
    }
    if (P <= 32) {
      water_prefix<1>(st, W, lane);
    } else {
      water_prefix<PlanConfig::kRankChunks>(st, W, lane);
    }
    __syncwarp();
    int level_room[8];  // room of each level's best group, -1 = none (num_levels <= 7)
    int level_begin[8];
    int best_absorbed = 0;
#pragma unroll 1
    for (int level = 0; level < st.num_levels; ++level) {
      const int size = P >> level;
      unsigned hi = 0;
      unsigned lo = 0;
#pragma unroll 1
      for (int g = lane; g < (1 << level); g += 32) {
        const int begin = g * size;
        const unsigned sum = st.prefix[begin + size] - st.prefix[begin];
        if ((sum & 127u) != 0) continue;  // a member has no free helper slot
        const int room = static_cast<int>(sum >> 7);
        if (room == 0) continue;
        if (latest >= 0 && meets_chain(st, latest, begin, size)) continue;
        const unsigned cold = st.cold_prefix[begin + size] - st.cold_prefix[begin];
        const unsigned a = static_cast<unsigned>(min(room, give));
        const unsigned l = ((127u - cold) << 7) | (127u - static_cast<unsigned>(g));
        if (a > hi || (a == hi && l > lo)) hi = a, lo = l;
      }
      const unsigned best_hi = __reduce_max_sync(PlanConfig::kFullMask, hi);
      level_room[level] = -1;
      if (best_hi > 0) {
        const unsigned key_lo = __reduce_max_sync(PlanConfig::kFullMask, hi == best_hi ? lo : 0u);
        const int begin = (127 - static_cast<int>(key_lo & 127u)) * size;
        level_room[level] = static_cast<int>((st.prefix[begin + size] - st.prefix[begin]) >> 7);
        level_begin[level] = begin;
        best_absorbed = max(best_absorbed, static_cast<int>(best_hi));
      }
    }
    if (best_absorbed <= 0) {
      __syncwarp();
      if (lane == 0) st.spent[e] = 1;
      continue;
    }
    // The finest level absorbing >= 7/8 of the best absorbable amount.
    GroupChoice g;
#pragma unroll 1
    for (int level = st.num_levels - 1; level >= 0; --level) {
      const int absorbed = min(level_room[level], give);
      if (absorbed > 0 && static_cast<long long>(absorbed) * 8 >= best_absorbed * 7LL) {
        g.level = level;
        g.begin = level_begin[level];
        break;
      }
    }

    // Quotas as in place(), against W: coldest first by (L, rank), each up to W - L.
    const int size = P >> g.level;
    int moved = 0;
#pragma unroll 1
    for (int i = lane; i < size; i += 32) {
      const int m = g.begin + i;
      const int lm = st.load[m];
      int take = 0;
      if (m != o && lm < W) {
        int before = 0;
#pragma unroll 4
        for (int j = 0; j < size; ++j) {
          const int m2 = g.begin + j;
          const int l2 = st.load[m2];
          if (m2 != o && l2 < W && (l2 < lm || (l2 == lm && m2 < m))) before += W - l2;
        }
        take = min(W - lm, max(0, give - before));
      }
      st.share[i] = take;
      moved += take;
    }
    moved = __reduce_add_sync(PlanConfig::kFullMask, moved);
    if (moved <= 0 || moved < p.min_move) {  // non-resident: no previous plan to match
      __syncwarp();
      if (lane == 0) st.spent[e] = 1;
      continue;
    }

    const bool owner_in = o >= g.begin && o < g.begin + size;
    const int entries = size + (owner_in ? 0 : 1);
    if (num_broadcasts >= st.max_broadcasts || quota_used + entries > st.quota_cap) {
      if (lane == 0)
        atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), kGpuPlanOverflow);
      break;
    }
    // The owner's remaining share moves to this broadcast; an earlier one of e keeps 0 for it.
    const int left = static_cast<int>(share) - moved;
    const int offset = quota_used;
    __syncwarp();
#pragma unroll 1
    for (int i = lane; i < size; i += 32) {  // each lane reads back only its own shares
      const int m = g.begin + i;
      const int take = st.share[i];
      st.quota[offset + i] = m == o ? left : take;
      st.recv_used[m] += 1;
      if (m != o) st.load[m] += take;  // lane 0 updates the owner below
    }
    if (lane == 0) {
      if (latest >= 0) st.quota[st.host_index(latest, o)] = 0;
      if (!owner_in) st.quota[offset + size] = left;
      st.send_used[o] += 1;
      st.load[o] -= moved;
      st.left[e] = left;
      const int b = num_broadcasts;
      st.b_expert[b] = e;
      st.b_owner[b] = o;
      st.b_level[b] = g.level;
      st.b_begin[b] = g.begin;
      st.b_size[b] = size;
      st.b_quota_offset[b] = offset;
      st.b_link[b] = latest;
      st.expert_broadcast[e] = b;
    }
    ++num_broadcasts;
    quota_used += entries;
  }
  __syncwarp();
  return num_broadcasts;
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
// broadcasts. Out of line: its code and second State view stay out of the HALO-Q path.
__device__ __noinline__ int place_iser(const State& st, const PlanParams& p, int T, int lane) {
  State challenger = st;
  challenger.use_buffer(1);
  start_candidate(st, true, lane);
  int num_kept = place_room_aware(st, p, T, lane);
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
  challenge(place(challenger, p, T, lane));
  constexpr int kSlackDivisor = 64;
  const int W = T + T / kSlackDivisor;
  if (static_cast<int>(cost_kept >> 32) > W) {
    start_candidate(challenger, true, lane);
    challenge(place_room_aware(challenger, p, W, lane));
  }
  return num_kept;
}

}  // namespace iser::cuda::plan_detail
