// Device stages of the HALO-Q planner kernel (plan.cuh): configuration, the shared-memory layout,
// the views of it and stage 1 (column sums); placement and coloring are in plan_place.cuh, the
// quota repair in plan_repair.cuh. Split from the kernel entry only to keep files short; see
// plan.cuh for the stage map and NOTEs.
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

// Words of the stage-4 pair lists (plan_repair.cuh); plans that need more repair by phases.
inline constexpr int kPairPoolWords = 4096;
// Listed pairs (per round) that the node level pass takes, one per side thread
// (plan_repair_schedule.cuh); plans with more get the rotation walk.
inline constexpr int kMaxLevelNodes = (PlanConfig::kWarps - 1) * 32;
// Bytes of one of its two level buffers: both rounds' nodes and a zero byte ("no predecessor").
inline constexpr int kLevelBufferBytes = 2 * kMaxLevelNodes + 4;
// Words of the kernel's scalars (plan_detail::Scalar).
inline constexpr int kScalarWords = 12;

// Shared-memory layout of the plan kernel, in int32 words (made on the host, a kernel argument).
// The arrays of one candidate placement (loads, broadcasts, quotas; iser: shares and spent
// flags) form one block of buffer_words words; iser plans its candidates in `iser_blocks` such
// blocks (plan_iser.cuh), which follow the first.
struct PlanSmem {
  int hist, candidates, home_load, load, expert_broadcast, b_expert, b_owner, b_level, b_begin,
      b_size, b_helper, b_mode, b_quota_offset, b_link, quota, buffer_words, order, entry, left,
      spent, host_bits, list_bits, level_table, zero_end, pair_head, rank_code, rotations,
      pair_items, finish_scratch_words, level_nodes, level_bytes, scalars, total;

  static PlanSmem make(int P, int E, int C, int max_broadcasts, int S, bool iser = false,
                       int iser_blocks = kIserSequentialBlocks) {
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
    s.left = take(iser ? E : 0);   // iser: routes of each expert its owner still computes
    s.spent = take(iser ? E : 0);  // iser: expert found no room (skipped for this owner)
    s.buffer_words = at - buffer_begin;
    if (iser) take(s.buffer_words * (iser_blocks - 1));  // the other candidate blocks
    s.order = take(max_broadcasts);
    s.entry = take(2 * quota_cap);  // int2 per entry (16-byte aligned)
    // ---- stage 4 schedule (plan_repair.cuh); host_bits .. zero_end are zeroed in stage 1 ----
    const int seats = P + (P & 1);
    const int ring_size = seats - 1;
    const int num_pairs = seats / 2;
    s.host_bits = take(P * ((max_broadcasts + 31) / 32));
    s.list_bits = take(3 * P);  // <= 71 rotations
    s.level_table = take((2 * ring_size + 2) * P);
    s.zero_end = at;
    s.pair_head = take(ring_size * num_pairs);
    s.rank_code = take(ring_size * P);
    s.rotations = take(ring_size);
    s.pair_items = take(kPairPoolWords);
    s.finish_scratch_words = at - s.pair_head;  // free before stage 4 (plan_iser_finish.cuh)
    s.level_nodes = take(kMaxLevelNodes);
    s.level_bytes = take((2 * kLevelBufferBytes + 3) / 4);  // two buffers, a byte per node
    s.scalars = take(kScalarWords);
    s.total = at;
    return s;
  }

  // The layout of a plan kernel launched with `params` (C = min(S, H)).
  static PlanSmem for_params(const PlanParams& params) {
    const int H = params.num_experts / params.num_ranks;
    return make(params.num_ranks, params.num_experts, params.num_slots < H ? params.num_slots : H,
                params.max_broadcasts, params.num_slots, params.iser, params.iser_blocks);
  }
};

namespace plan_detail {

// kPoolTopWord: words of pair_items taken (stage 4); kPhaseBitsWord ..: a bit per circle-method
// rotation with at least one trading pair (<= 71 rotations: three words); kNodeCountWord: listed
// pairs numbered for the node level pass; kDeepestWord: its deepest level.
enum Scalar {
  kStatusWord,
  kTargetWord,
  kNumBroadcastsWord,
  kTotalWord,
  kPoolTopWord,
  kPhaseBitsWord,
  kNodeCountWord = kPhaseBitsWord + 3,
  kDeepestWord,
  kNumScalarWords
};
static_assert(kNumScalarWords <= kScalarWords, "PlanSmem::scalars holds every scalar");

__device__ __forceinline__ unsigned long long global_timer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void prefetch_l2(const void* address) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
}

__device__ __forceinline__ void named_barrier(int id, int num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// bar.red.or on named barrier `id` of num_threads threads (a multiple of 32): whether any of them
// passed true.
__device__ __forceinline__ bool named_barrier_or(int id, int num_threads, bool value) {
  int any;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\tsetp.ne.s32 p, %3, 0;\n\tbar.red.or.pred q, %1, %2, p;\n\t"
      "selp.s32 %0, 1, 0, q;\n\t}"
      : "=r"(any)
      : "r"(id), "r"(num_threads), "r"(value ? 1 : 0)
      : "memory");
  return any != 0;
}

// K inclusive scans over the lanes at once, in place; only lanes [0, num_items) need to be exact.
// The K shuffles of a step are independent, so K scans cost one scan's chain (two scans called
// one after the other do not interleave when num_items is a run-time value: each step is a
// branch). A num_items known at compile time leaves no test in the unrolled steps.
template <typename T, int K>
__device__ __forceinline__ void warp_inclusive_scans(T (&v)[K], int lane, int num_items = 32) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    if (d >= num_items) break;
    T n[K];
#pragma unroll
    for (int k = 0; k < K; ++k) n[k] = __shfl_up_sync(PlanConfig::kFullMask, v[k], d);
    if (lane >= d) {
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] += n[k];
    }
  }
}

template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v, int lane, int num_items = 32) {
  T values[1] = {v};
  warp_inclusive_scans(values, lane, num_items);
  return values[0];
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
  // The repair's copy of the compact entries, {own routes c[r][e_b], quota}: one 8-byte load
  // gives a trade both (written in the set-up, read by the output stage).
  int2* entry;
  int32_t* scalars;
  int32_t* left;   // iser: [E] routes the owner still computes
  int32_t* spent;  // iser: [E] 1 when no group had room for the expert
  // Stage 4 schedule (plan_repair.cuh).
  uint32_t* host_bits;   // [P][ceil(max_broadcasts / 32)] sorted positions a rank hosts
  uint32_t* list_bits;   // [P][3] rotations in which the rank's pair is listed (level pass)
  int32_t* level_table;  // [2 * ring_size + 2][P] head of the level's pair with receiver a, 0
  int32_t* pair_head;    // [ring_size][num_pairs] offset | n << 16 of a pair's list, 0 = none
  int32_t* rank_code;    // [ring_size][P] each rank's pair per rotation (plan_repair.cuh: RankCode)
  int32_t* pair_items;   // [kPairPoolWords] compact quota indices ia | id << 16
  int32_t* level_nodes;  // [kMaxLevelNodes] listed pair i's NodeCode (node level pass)
  uint8_t* level_bytes;  // [2][kLevelBufferBytes] node levels (node level pass)
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
    left += w;
    spent += w;
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

}  // namespace plan_detail

}  // namespace iser::cuda
