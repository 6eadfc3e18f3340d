// Chain leveling of the `iser` policy's kept placement on the GPU (warp 0, after the candidate
// comparison), bit-exact with level_chains of the CPU (src/core/planner/iser_chains.cpp, where
// the steps and tie rules are defined): while the max load is above stop_at, for at most
// kIserChainSteps · P steps, a breadth-first search from the busiest rank h over "a → b when a
// holds quota in a broadcast of an expert b hosts", then δ routes along the shortest chain to
// the least loaded reached rank r.
// Rank sets are three 32-bit words (kGpuMaxRanks <= 96), kept per broadcast in shared memory:
// its hosts and its expert's hosts (every broadcast of the expert). A BFS level is one pass over
// the broadcasts, a lane per broadcast, each testing (frontier ∩ hosts) for a rank holding quota
// and OR-ing its expert's hosts into the next frontier, then three warp OR reductions; the path
// back is one ballot pass per link. Scratch: the second candidate block (free once the kept
// placement sits in block 0).
#pragma once

#include "cuda/plan_stages.cuh"
#include "iser/gpu_planner.h"
#include "iser/planner.h"

namespace iser::cuda::plan_detail {

inline constexpr int kRankWords = 3;
static_assert(kGpuMaxRanks <= 32 * kRankWords, "a rank set holds every rank");

struct RankSet {
  unsigned w0 = 0, w1 = 0, w2 = 0;
  __device__ __forceinline__ bool has(int r) const {
    const unsigned w = r < 32 ? w0 : r < 64 ? w1 : w2;
    return (w >> (r & 31)) & 1u;
  }
  __device__ __forceinline__ bool empty() const { return (w0 | w1 | w2) == 0; }
  __device__ __forceinline__ RankSet operator&(const RankSet& o) const {
    return {w0 & o.w0, w1 & o.w1, w2 & o.w2};
  }
  __device__ __forceinline__ void load(const unsigned* p) {
    w0 = p[0];
    w1 = p[1];
    w2 = p[2];
  }
  __device__ __forceinline__ void store(unsigned* p) const {
    p[0] = w0;
    p[1] = w1;
    p[2] = w2;
  }
};

// Word k of the rank range [begin, end).
__device__ __forceinline__ unsigned range_word(int begin, int end, int k) {
  const int lo = min(max(begin - 32 * k, 0), 32);
  const int hi = min(max(end - 32 * k, 0), 32);
  if (lo >= hi) return 0u;  // so lo < 32 below
  return (hi == 32 ? ~0u : (1u << hi) - 1u) & ~((1u << lo) - 1u);
}

// The lowest rank of `set` (hosts of b) holding quota in b, -1 if none.
__device__ __forceinline__ int lowest_giver(const State& st, int b, const RankSet& set) {
  const unsigned words[kRankWords] = {set.w0, set.w1, set.w2};
#pragma unroll
  for (int k = 0; k < kRankWords; ++k) {
    unsigned m = words[k];
#pragma unroll 1
    while (m != 0) {
      const int v = 32 * k + __ffs(m) - 1;
      m &= m - 1;
      if (st.quota[st.host_index(b, v)] > 0) return v;
    }
  }
  return -1;
}

// Scratch of level_chains: a free candidate block (the caller's: plan_iser_finish.cuh). NOTE:
// 6·max_broadcasts rank-set words, 3·P level words and 2·P link words; a candidate block
// (PlanSmem::buffer_words >= P + 3E + P·S + 10·max_broadcasts, E >= P) holds them.
struct ChainScratch {
  unsigned* host;         // [max_broadcasts][3] hosts of each broadcast
  unsigned* expert_host;  // [max_broadcasts][3] hosts of every broadcast of its expert
  unsigned* level;        // [P][3] BFS level d's ranks
  int* link;              // [P] path link i (given from level i): b | giver << 16
  int* link_to;           // [P] the broadcast the link's receiver gets the routes in
  __device__ __forceinline__ ChainScratch(const State& st, int* scratch) {
    host = reinterpret_cast<unsigned*>(scratch);
    expert_host = host + kRankWords * st.max_broadcasts;
    level = expert_host + kRankWords * st.max_broadcasts;
    link = reinterpret_cast<int*>(level + kRankWords * st.P);
    link_to = link + st.P;
  }
};

// Host sets: the group, the owner only on its expert's latest broadcast; expert host sets: the
// union over the expert's broadcasts (latest first, along b_link).
// NOTE: HALO-Q's placement broadcasts an expert once and links none (b_link = -1).
__device__ __forceinline__ void chain_host_sets(const State& st, int num_broadcasts,
                                                const ChainScratch& cs, int lane) {
#pragma unroll 1
  for (int b = lane; b < num_broadcasts; b += 32) {
    const int begin = st.b_begin[b];
    const int owner = st.b_owner[b];
    const unsigned bit = 1u << (owner & 31);
    const bool owner_hosts = st.expert_broadcast[st.b_expert[b]] == b;
#pragma unroll
    for (int k = 0; k < kRankWords; ++k) {
      unsigned w = range_word(begin, begin + st.b_size[b], k);
      if ((owner >> 5) == k) w = owner_hosts ? (w | bit) : (w & ~bit);
      cs.host[kRankWords * b + k] = w;
    }
  }
  __syncwarp();
#pragma unroll 1
  for (int b = lane; b < num_broadcasts; b += 32) {
    RankSet all;
#pragma unroll 1
    for (int y = st.expert_broadcast[st.b_expert[b]]; y >= 0; y = st.b_link[y]) {
      RankSet hs;
      hs.load(cs.host + kRankWords * y);
      all.w0 |= hs.w0;
      all.w1 |= hs.w1;
      all.w2 |= hs.w2;
    }
    all.store(cs.expert_host + kRankWords * b);
  }
  __syncwarp();
}

// Breadth-first search from h, stopping after the level that reaches m: level d's ranks to
// cs.level (lane 0); returns the ranks reached, h included.
__device__ __forceinline__ RankSet chain_search(const State& st, int num_broadcasts,
                                                const ChainScratch& cs, int h, int m, int lane) {
  RankSet frontier;
  if (h < 32) {
    frontier.w0 = 1u << h;
  } else if (h < 64) {
    frontier.w1 = 1u << (h - 32);
  } else {
    frontier.w2 = 1u << (h - 64);
  }
  RankSet visited = frontier;
  if (lane == 0) frontier.store(cs.level);
  int depth = 0;
#pragma unroll 1
  while (!visited.has(m)) {
    RankSet next;
#pragma unroll 1
    for (int b = lane; b < num_broadcasts; b += 32) {
      RankSet hs;
      hs.load(cs.host + kRankWords * b);
      const RankSet from = hs & frontier;
      if (!from.empty() && lowest_giver(st, b, from) >= 0) {
        RankSet all;
        all.load(cs.expert_host + kRankWords * b);
        next.w0 |= all.w0;
        next.w1 |= all.w1;
        next.w2 |= all.w2;
      }
    }
    next.w0 = __reduce_or_sync(PlanConfig::kFullMask, next.w0) & ~visited.w0;
    next.w1 = __reduce_or_sync(PlanConfig::kFullMask, next.w1) & ~visited.w1;
    next.w2 = __reduce_or_sync(PlanConfig::kFullMask, next.w2) & ~visited.w2;
    if (next.empty()) break;
    visited.w0 |= next.w0;
    visited.w1 |= next.w1;
    visited.w2 |= next.w2;
    frontier = next;
    ++depth;
    if (lane == 0) frontier.store(cs.level + kRankWords * depth);
  }
  __syncwarp();  // lane 0's level words
  return visited;
}

// The path back from r at level depth_r to h: the lowest broadcast, of an expert c hosts, in
// which a rank of level i holds quota, from the lowest such rank; c receives in the earliest
// broadcast of the expert it hosts. Links to cs.link / link_to (lane 0); returns
// min(delta, the giver's quota on every link), or -1 when a rank has no parent link (an
// internal error).
__device__ __forceinline__ int chain_path(const State& st, int num_broadcasts,
                                          const ChainScratch& cs, int r, int depth_r, int delta,
                                          int lane) {
#pragma unroll 1
  for (int i = depth_r - 1, c = r; i >= 0; --i) {
    RankSet givers;
    givers.load(cs.level + kRankWords * i);
    bool linked = false;
#pragma unroll 1
    for (int base = 0; base < num_broadcasts && !linked; base += 32) {
      const int b = base + lane;
      int v = -1;
      if (b < num_broadcasts) {
        RankSet all;
        all.load(cs.expert_host + kRankWords * b);
        if (all.has(c)) {
          RankSet hs;
          hs.load(cs.host + kRankWords * b);
          v = lowest_giver(st, b, hs & givers);
        }
      }
      const unsigned found = __ballot_sync(PlanConfig::kFullMask, v >= 0);
      if (found != 0) {
        const int src = __ffs(found) - 1;
        v = __shfl_sync(PlanConfig::kFullMask, v, src);
        if (lane == 0) {
          cs.link[i] = (base + src) | (v << 16);
          int to = -1;
#pragma unroll 1
          for (int y = st.expert_broadcast[st.b_expert[base + src]]; y >= 0; y = st.b_link[y]) {
            RankSet hs;
            hs.load(cs.host + kRankWords * y);
            if (hs.has(c)) to = y;  // the walk goes latest first: the last match is earliest
          }
          cs.link_to[i] = to;
        }
        delta = min(delta, st.quota[st.host_index(base + src, v)]);
        c = v;
        linked = true;
      }
    }
    if (!linked) return -1;
  }
  return delta;
}

// One warp, every lane; `scratch`: a candidate block of its own. Out of line, State by value (as
// place_iser_sequential).
inline __device__ __noinline__ void level_chains(const State st, int num_broadcasts, int stop_at,
                                                 int* scratch, int lane) {
  const ChainScratch cs(st, scratch);
  chain_host_sets(st, num_broadcasts, cs, lane);
  const int max_steps = kIserChainSteps * st.P;
#pragma unroll 1
  for (int step = 0; step < max_steps; ++step) {
    // Keys pack a load (< 2^25) with a rank (< 2^7): the busiest (lowest rank first) and the
    // least loaded (lowest rank first).
    unsigned busiest = 0;
    unsigned coldest = ~0u;
#pragma unroll 1
    for (int r = lane; r < st.P; r += 32) {
      const unsigned l = static_cast<unsigned>(st.load[r]) << 7;
      busiest = max(busiest, l | (127u - r));
      coldest = min(coldest, l | static_cast<unsigned>(r));
    }
    busiest = __reduce_max_sync(PlanConfig::kFullMask, busiest);
    coldest = __reduce_min_sync(PlanConfig::kFullMask, coldest);
    const int h = 127 - static_cast<int>(busiest & 127u);
    const int load_h = static_cast<int>(busiest >> 7);
    if (load_h <= stop_at || load_h - static_cast<int>(coldest >> 7) < 2) break;
    const RankSet visited =
        chain_search(st, num_broadcasts, cs, h, static_cast<int>(coldest & 127u), lane);
    // Target: the least loaded reached rank other than h (lowest rank first).
    unsigned target = ~0u;
#pragma unroll 1
    for (int r = lane; r < st.P; r += 32) {
      if (r != h && visited.has(r)) {
        target = min(target, (static_cast<unsigned>(st.load[r]) << 7) | static_cast<unsigned>(r));
      }
    }
    target = __reduce_min_sync(PlanConfig::kFullMask, target);
    if (target == ~0u || load_h - static_cast<int>(target >> 7) < 2) break;
    const int r = static_cast<int>(target & 127u);
    int depth_r = 1;
    RankSet at;
    at.load(cs.level + kRankWords);
#pragma unroll 1
    while (!at.has(r)) at.load(cs.level + kRankWords * ++depth_r);
    const int delta = chain_path(st, num_broadcasts, cs, r, depth_r,
                                 (load_h - static_cast<int>(target >> 7)) / 2, lane);
    if (delta < 0) {  // every rank of a level > 0 has a parent link: an internal error
      if (lane == 0) {
        atomicOr(reinterpret_cast<unsigned*>(&st.scalars[kStatusWord]), kGpuPlanInvariant);
      }
      break;
    }
    if (lane == 0) {
#pragma unroll 1
      for (int i = 0; i < depth_r; ++i) {
        const int to = i + 1 < depth_r ? cs.link[i + 1] >> 16 : r;
        st.quota[st.host_index(cs.link[i] & 0xffff, cs.link[i] >> 16)] -= delta;
        st.quota[st.host_index(cs.link_to[i], to)] += delta;
      }
      st.load[h] -= delta;
      st.load[r] += delta;
    }
    __syncwarp();
  }
}

}  // namespace iser::cuda::plan_detail
