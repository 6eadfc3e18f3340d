// Replication kernel (DESIGN §9): moves owners' home bundles into members' helper slots in 8-KiB
// slices, then publishes READY. One CTA set per writer rank (blockIdx.y = local rank); each warp
// moves one slice at a time (loads 8 KiB into registers, stores it to every member).
//
// The peer and multicast paths share everything (reuse fence, task enumeration, scheduling,
// loads, READY publication); only `store_slice` differs.
#pragma once

#include <cub/block/block_scan.cuh>

#include "cuda/kernels.h"
#include "cuda/sync.cuh"

namespace iser::cuda {

struct ReplicateConfig {
  static constexpr int kThreads = 512;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kVecPerLane = static_cast<int>(kSliceBytes / 16 / 32);  // 16 x 16 B
  static constexpr int kMaxRanks = 1024;
  static constexpr int kRankWords = kMaxRanks / 32;
};

struct ReplicateParams {
  RankSpace space;
  ReplicateArgs args;
  int32_t local_begin = 0;
};

__device__ __forceinline__ int effective_mode(const CopyOp& op, int32_t mode_override) {
  return mode_override >= 0 ? mode_override : op.mode;
}

// Slices writer `w` moves for `op`: all of them for the owner of an owner-direct op; slices
// j = i (mod g) for member i of a SAMI op.
__device__ __forceinline__ int64_t op_slice_count(const CopyOp& op, int mode, int w,
                                                  int64_t num_slices) {
  if (mode == kCopyModeDirect) return w == op.owner ? num_slices : 0;
  const int member_idx = w - op.group_begin;
  if (member_idx < 0 || member_idx >= op.group_size || member_idx >= num_slices) return 0;
  return (num_slices - member_idx + op.group_size - 1) / op.group_size;
}

__device__ __forceinline__ int64_t op_slice_index(const CopyOp& op, int mode, int w,
                                                  int64_t task_idx) {
  return mode == kCopyModeDirect ? task_idx : (w - op.group_begin) + task_idx * op.group_size;
}

__device__ __forceinline__ bool test_bit(const uint32_t* bits, int idx) {
  return (bits[idx >> 5] >> (idx & 31)) & 1u;
}

// Reuse fence: marks in `targets` every member `w` writes to and in `blocked` those that have not
// released generation - num_banks (the bank's previous user) before the deadline. Returns true
// when some target is blocked. Call from all threads of the CTA.
__device__ bool fence_targets(const RankSpace& space, const CopyOp* ops, int num_ops,
                              int32_t mode_override, int w, uint64_t generation, int num_banks,
                              uint32_t* targets, uint32_t* blocked, Scratch* scratch) {
  const int num_ranks = space.layout.num_ranks;
  const int64_t num_slices = (space.layout.bundle_bytes + kSliceBytes - 1) / kSliceBytes;
  for (int i = threadIdx.x; i < ReplicateConfig::kRankWords; i += blockDim.x) {
    targets[i] = 0;
    blocked[i] = 0;
  }
  __shared__ int any_blocked;
  __shared__ int has_targets;
  if (threadIdx.x == 0) {
    any_blocked = 0;
    has_targets = 0;
  }
  __syncthreads();
  for (int k = threadIdx.x; k < num_ops; k += blockDim.x) {
    const CopyOp op = ops[k];
    if (op_slice_count(op, effective_mode(op, mode_override), w, num_slices) == 0) continue;
    atomicExch(&has_targets, 1);
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      atomicOr(&targets[m >> 5], 1u << (m & 31));
    }
  }
  __syncthreads();
  if (has_targets && generation > static_cast<uint64_t>(num_banks)) {
    // NOTE: two conditions free the bank of generation g - B on member m: (a) m's consumer of
    // g - B released it, and (b) every writer of g - B finished (published 2(g-B) or 2(g-B)+1),
    // so a late writer of g - B can never overwrite bytes of generation g after READY g. A
    // timeout on either blocks the target: its bytes are left alone and READY g says failed.
    const uint64_t need = generation - num_banks;
    const uint64_t deadline = globaltimer_ns() + space.timeout_ns;
    const char* base = space.peer_bases[w];
    const auto* consumed = reinterpret_cast<const uint64_t*>(base + space.layout.consumed_flags);
    const auto* ready = reinterpret_cast<const uint64_t*>(base + space.layout.ready_flags);
    __shared__ int writers_drained;
    if (threadIdx.x == 0) writers_drained = 1;
    __syncthreads();
    for (int x = threadIdx.x; x < num_ranks; x += blockDim.x) {
      if (wait_at_least(ready + x, 2 * need, deadline) < 2 * need) {
        atomicExch(&writers_drained, 0);
        report(scratch, static_cast<uint32_t>(StatusCode::kFenceTimeout), x, generation);
      }
    }
    __syncthreads();
    for (int m = threadIdx.x; m < num_ranks; m += blockDim.x) {
      if (!test_bit(targets, m)) continue;
      if (!writers_drained || wait_at_least(consumed + m, need, deadline) < need) {
        atomicOr(&blocked[m >> 5], 1u << (m & 31));
        atomicExch(&any_blocked, 1);
        if (writers_drained) {
          report(scratch, static_cast<uint32_t>(StatusCode::kFenceTimeout), m, generation);
        }
      }
    }
  }
  __syncthreads();
  return any_blocked != 0;
}

// Publication of READY by the last CTA of writer `w` to drain: 2*generation + ok on every rank.
// NOTE: each CTA's stores are ordered before its arrival by bar.sync + fence.acq_rel.sys (release
// pattern); the last CTA's arrival + fence (acquire pattern) makes all of them happen-before its
// st.release.sys of the flag, which is cumulative. A reader that acquires 2g+1 therefore sees
// every byte of generation g in its helper slots.
__device__ void publish_ready(const RankSpace& space, int w, uint64_t generation, bool cta_failed,
                              unsigned ctas_per_rank, Scratch* scratch) {
  __shared__ int is_last;
  __shared__ uint64_t value;
  const int any_failed = __syncthreads_or(cta_failed ? 1 : 0);
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    if (any_failed) atomicOr(&scratch->replicate_failed, 1u);
    const uint32_t arrived = atomicAdd(&scratch->replicate_arrivals, 1u);
    is_last = arrived == ctas_per_rank - 1;
    if (is_last) {
      fence_acq_rel_sys();
      const uint32_t failed = atomicExch(&scratch->replicate_failed, 0u);
      scratch->replicate_arrivals = 0;  // every CTA of this launch has arrived
      value = 2 * generation + (failed ? 0 : 1);
    }
  }
  __syncthreads();
  if (!is_last) return;
  for (int d = threadIdx.x; d < space.layout.num_ranks; d += blockDim.x) {
    auto* flag = reinterpret_cast<uint64_t*>(space.peer_bases[d] + space.layout.ready_flags) + w;
    store_release_sys(flag, value);
  }
}

__device__ __forceinline__ int4 load_vec(const char* ptr) {
  int4 v;
  asm volatile("ld.global.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

__device__ __forceinline__ void store_vec(char* ptr, const int4& v) {
  asm volatile("st.global.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

// NOTE: multimem.st writes the value to every GPU bound to the multicast object; bytes are
// reinterpreted as f32 lanes without arithmetic, so the copy stays bitwise.
__device__ __forceinline__ void multimem_store_vec(char* ptr, const int4& v) {
  asm volatile("multimem.st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(ptr),
               "f"(__int_as_float(v.x)), "f"(__int_as_float(v.y)), "f"(__int_as_float(v.z)),
               "f"(__int_as_float(v.w))
               : "memory");
}

// The only transport-specific step: where the loaded slice goes. Returns false when a target
// was skipped (blocked by the reuse fence).
template <StoreKind kStore>
__device__ __forceinline__ bool store_slice(const ReplicateParams& p, const CopyOp& op,
                                            const uint32_t* blocked, int64_t slot_offset,
                                            int64_t slice_idx,
                                            const int4 (&v)[ReplicateConfig::kVecPerLane],
                                            int num_vec) {
  const int lane = threadIdx.x & 31;
  if constexpr (kStore == StoreKind::kPeer) {
    bool complete = true;
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      if (test_bit(blocked, m)) {
        complete = false;
        continue;
      }
      char* dst = p.space.peer_bases[m] + slot_offset;
#pragma unroll
      for (int u = 0; u < ReplicateConfig::kVecPerLane; ++u) {
        const int idx = u * 32 + lane;
        if (idx < num_vec) store_vec(dst + idx * 16, v[u]);
      }
    }
    return complete;
  } else {
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      if (test_bit(blocked, m)) return false;  // one store reaches all members: all or none
    }
    const int num_ranks = p.space.layout.num_ranks;
    const int num_groups = num_ranks / op.group_size;
    const int group_idx = num_groups - 1 + op.group_begin / op.group_size;
    // Same arithmetic as iser::multicast_offset (tested on the host).
    char* dst = p.args.multicast_bases[group_idx] +
                (static_cast<int64_t>(p.args.bank) * p.space.layout.num_slots + op.helper) *
                    p.space.layout.slot_stride +
                slice_idx * kSliceBytes;
#pragma unroll
    for (int u = 0; u < ReplicateConfig::kVecPerLane; ++u) {
      const int idx = u * 32 + lane;
      if (idx < num_vec) multimem_store_vec(dst + idx * 16, v[u]);
    }
    return true;
  }
}

template <StoreKind kStore>
__global__ void __launch_bounds__(ReplicateConfig::kThreads, 1)
    replicate_kernel(const ReplicateParams p) {
  using Scan = cub::BlockScan<int64_t, ReplicateConfig::kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int64_t prefix[kMaxLocalCopyOps + 1];
  __shared__ uint32_t targets[ReplicateConfig::kRankWords];
  __shared__ uint32_t blocked[ReplicateConfig::kRankWords];
  __shared__ int64_t running;

  const RankSpace& space = p.space;
  const runtime::RegionLayout& layout = space.layout;
  const int local_idx = p.local_begin + static_cast<int>(blockIdx.y);
  const int w = space.first_rank + local_idx;
  Scratch* scratch = space.scratch + local_idx;
  const int num_ops = p.args.num_ops;
  const int32_t mode_override = p.args.mode_override;
  const int64_t num_slices = (layout.bundle_bytes + kSliceBytes - 1) / kSliceBytes;

  bool cta_failed = fence_targets(space, p.args.ops, num_ops, mode_override, w, p.args.generation,
                                  layout.num_banks, targets, blocked, scratch);

  // Exclusive prefix of this writer's slice counts over the ops (tasks are numbered op-major).
  if (threadIdx.x == 0) running = 0;
  __syncthreads();
  for (int base = 0; base < num_ops; base += ReplicateConfig::kThreads) {
    const int k = base + static_cast<int>(threadIdx.x);
    int64_t count = 0;
    if (k < num_ops) {
      const CopyOp op = p.args.ops[k];
      count = op_slice_count(op, effective_mode(op, mode_override), w, num_slices);
    }
    int64_t excl = 0;
    int64_t total = 0;
    Scan(scan_storage).ExclusiveSum(count, excl, total);
    if (k < num_ops) prefix[k] = running + excl;
    __syncthreads();
    if (threadIdx.x == 0) running += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) prefix[num_ops] = running;
  __syncthreads();
  const int64_t num_tasks = prefix[num_ops];

  const int warp_idx = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * ReplicateConfig::kWarps;
  bool warp_failed = false;
  for (int64_t task = blockIdx.x * ReplicateConfig::kWarps + warp_idx; task < num_tasks;
       task += warp_stride) {
    // prefix[lo] <= task < prefix[hi]; ends on the op that owns the task (its count is > 0).
    int lo = 0;
    int hi = num_ops;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (prefix[mid] <= task) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const CopyOp op = p.args.ops[lo];
    const int mode = effective_mode(op, mode_override);
    const int64_t slice_idx = op_slice_index(op, mode, w, task - prefix[lo]);
    const int64_t slice_begin = slice_idx * kSliceBytes;
    const int64_t bytes = min(kSliceBytes, layout.bundle_bytes - slice_begin);
    const int num_vec = static_cast<int>(bytes / 16);
    const char* src = space.peer_bases[op.owner] +
                      layout.home_slot(p.args.layer, op.expert % layout.experts_per_rank) +
                      slice_begin;
    int4 v[ReplicateConfig::kVecPerLane];
#pragma unroll
    for (int u = 0; u < ReplicateConfig::kVecPerLane; ++u) {
      const int idx = u * 32 + lane;
      if (idx < num_vec) v[u] = load_vec(src + idx * 16);
    }
    const int64_t slot_offset = layout.helper_slot(p.args.bank, op.helper) + slice_begin;
    if (!store_slice<kStore>(p, op, blocked, slot_offset, slice_idx, v, num_vec)) {
      warp_failed = true;
    }
  }
  if (warp_failed) cta_failed = true;
  publish_ready(space, w, p.args.generation, cta_failed, gridDim.x, scratch);
}

}  // namespace iser::cuda
