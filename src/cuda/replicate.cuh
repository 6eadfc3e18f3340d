// Replication kernel (docs/design.md §9): moves owners' home bundles into members' helper slots in
// 8-KiB slices, then publishes READY. One CTA set per writer rank (blockIdx.y = local rank); the
// writer's slices ("tasks", op-major) are dealt round-robin to the warps of its CTAs.
//
// Two copy paths (CopyPath) share the reuse fence, task enumeration and READY publication:
//  - bulk (sm_90): every warp runs a pipeline of `stages` 8-KiB shared-memory stages; lane 0
//    loads slices with cp.async.bulk (mbarrier completion) and stores each one to every member
//    with bulk stores, recycling a stage once its stores have read it. A few threads keep up to
//    176 KiB per SM in flight, and the first loads are issued before the reuse fence waits.
//  - registers: each warp loads a slice into registers (16 x 16 B per lane) and stores it.
// In both, the peer and multicast stores differ only in `store_*` (multimem.st from registers).
// p2p-sami-host adds host-lane CTAs after the copy CTAs (blockIdx.x >= copy CTAs): they stage the
// tail of the owner's ops in pinned host memory, or fetch it from there (cuda/host_lane.h,
// cuda/host_lane.cuh).
#pragma once

#include "cuda/bulk_copy.cuh"
#include "cuda/host_lane.cuh"
#include "cuda/host_lane.h"
#include "cuda/kernels.h"
#include "cuda/replicate_base.cuh"
#include "cuda/sync.cuh"
#include "cuda/writers.h"

namespace iser::cuda {

// Slices writer `w` moves for `op` under `mode`, and the slice of its task `task_idx` (who writes
// what: cuda/writers.h).
__device__ __forceinline__ int64_t op_slice_count(const CopyOp& op, TransportMode mode, int w,
                                                  int64_t num_slices) {
  return runtime::writer_slice_count(runtime::op_writer(op, mode, w), num_slices);
}

__device__ __forceinline__ int64_t op_slice_index(const CopyOp& op, TransportMode mode, int w,
                                                  int64_t task_idx) {
  return runtime::writer_slice_index(runtime::op_writer(op, mode, w), task_idx);
}

// Reuse fence: marks in `targets` every member `w` writes to and in `blocked` those that have not
// released generation - num_banks (the bank's previous user) before the deadline. Returns true
// when some target is blocked. Call from all threads of the CTA.
// `host_slices` > 0: w's host-lane roles count as writing to the op's members too (runtime/
// host_lane.h; the staging area itself is freed by the writers-drained condition below).
__device__ bool fence_targets(const RankSpace& space, const CopyOp* ops, int num_ops,
                              int32_t mode_override, int w, uint64_t generation, int num_banks,
                              int64_t host_slices, uint32_t* targets, uint32_t* blocked,
                              Scratch* scratch) {
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
    if (runtime::nvlink_slice_count(op, runtime::effective_mode(op, mode_override), w, num_slices,
                                    host_slices) == 0 &&
        runtime::host_role(op, w, host_slices) == runtime::HostRole::kNone)
      continue;
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
      scratch->replicate_arrivals = 0;   // every CTA of this launch has arrived
      scratch->generation = generation;  // read by the next kDeviceGeneration call
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

// NOTE: multimem.st writes the value to every GPU bound to the multicast object; bytes are
// reinterpreted as f32 lanes without arithmetic, so the copy stays bitwise.
__device__ __forceinline__ void multimem_store_vec(char* ptr, const int4& v) {
  asm volatile("multimem.st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(ptr),
               "f"(__int_as_float(v.x)), "f"(__int_as_float(v.y)), "f"(__int_as_float(v.z)),
               "f"(__int_as_float(v.w))
               : "memory");
}

// Exclusive prefix of writer w's slice counts over the ops into prefix[0..num_ops] (tasks are
// numbered op-major). Any block size that is a multiple of 32; call from all threads.
__device__ void scan_slice_counts(const ReplicateParams& p, int w, int64_t num_slices,
                                  int64_t* prefix, int64_t* warp_sums) {
  const int num_ops = p.args.num_ops;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp_idx = static_cast<int>(threadIdx.x) / 32;
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  int64_t running = 0;  // identical in every thread
  for (int base = 0; base < num_ops; base += static_cast<int>(blockDim.x)) {
    const int k = base + static_cast<int>(threadIdx.x);
    int64_t count = 0;
    if (k < num_ops) {
      const CopyOp op = p.args.ops[k];
      count = op_slice_count(op, runtime::effective_mode(op, p.args.mode_override), w, num_slices);
    }
    int64_t inclusive = count;
    for (int d = 1; d < 32; d *= 2) {
      const int64_t up = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += up;
    }
    if (lane == 31) warp_sums[warp_idx] = inclusive;
    __syncthreads();
    if (warp_idx == 0) {
      int64_t sum = lane < num_warps ? warp_sums[lane] : 0;
      for (int d = 1; d < 32; d *= 2) {
        const int64_t up = __shfl_up_sync(0xffffffffu, sum, d);
        if (lane >= d) sum += up;
      }
      if (lane < num_warps) warp_sums[lane] = sum;  // inclusive over warps
    }
    __syncthreads();
    const int64_t before = warp_idx == 0 ? 0 : warp_sums[warp_idx - 1];
    if (k < num_ops) prefix[k] = running + before + inclusive - count;
    running += warp_sums[num_warps - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) prefix[num_ops] = running;
  __syncthreads();
}

// One slice of one op, as writer w moves it.
// (Trivially constructible: the bulk path keeps one per stage in shared memory.)
struct SliceTask {
  CopyOp op;
  int64_t slice_idx;
  const char* src;      // owner's home bundle, this slice
  int64_t slot_offset;  // helper slot (bank), this slice, inside every member's region
  int32_t bytes;
};

// `op_cursor`: the op of the caller's previous task (0 at first). A warp's tasks increase, so the
// owning op is found by scanning forward from it (amortised O(1), no search per slice).
__device__ __forceinline__ SliceTask locate_task(const ReplicateParams& p, const int64_t* prefix,
                                                 int w, int bank, int64_t task, int& op_cursor) {
  const runtime::RegionLayout& layout = p.space.layout;
  // Ends on the op with prefix[lo] <= task < prefix[lo + 1] (its count is > 0); prefix[num_ops]
  // = num_tasks > task bounds the scan.
  int lo = op_cursor;
  while (prefix[lo + 1] <= task) ++lo;
  op_cursor = lo;
  SliceTask t;
  t.op = p.args.ops[lo];
  const TransportMode mode = runtime::effective_mode(t.op, p.args.mode_override);
  t.slice_idx = op_slice_index(t.op, mode, w, task - prefix[lo]);
  const int64_t slice_begin = t.slice_idx * kSliceBytes;
  t.bytes = static_cast<int32_t>(min(kSliceBytes, layout.bundle_bytes - slice_begin));
  t.src = p.space.peer_bases[t.op.owner] +
          layout.home_slot(p.args.layer, t.op.expert % layout.experts_per_rank) + slice_begin;
  t.slot_offset = layout.helper_slot(bank, t.op.helper) + slice_begin;
  return t;
}

// Where a slice lands in its group's multicast object (same arithmetic as
// iser::multicast_offset, tested on the host).
__device__ __forceinline__ char* multicast_slice(const ReplicateParams& p, const SliceTask& t,
                                                 int bank) {
  const int num_groups = p.space.layout.num_ranks / t.op.group_size;
  const int group_idx = num_groups - 1 + t.op.group_begin / t.op.group_size;
  return p.args.multicast_bases[group_idx] +
         (static_cast<int64_t>(bank) * p.space.layout.num_slots + t.op.helper) *
             p.space.layout.slot_stride +
         t.slice_idx * kSliceBytes;
}

__device__ __forceinline__ bool any_blocked(const CopyOp& op, const uint32_t* blocked) {
  for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
    if (test_bit(blocked, m)) return true;
  }
  return false;
}

// ---- register path ---------------------------------------------------------------------------

// Stores a slice held in registers (whole warp). Returns false when a target was skipped
// (blocked by the reuse fence).
template <StoreKind kStore>
__device__ __forceinline__ bool store_registers(const ReplicateParams& p, const SliceTask& t,
                                                int bank, const uint32_t* blocked,
                                                const int4 (&v)[ReplicateConfig::kVecPerLane]) {
  const int lane = threadIdx.x & 31;
  const int num_vec = t.bytes / 16;
  if constexpr (kStore == StoreKind::kPeer) {
    bool complete = true;
    for (int m = t.op.group_begin; m < t.op.group_begin + t.op.group_size; ++m) {
      if (test_bit(blocked, m)) {
        complete = false;
        continue;
      }
      char* dst = p.space.peer_bases[m] + t.slot_offset;
#pragma unroll
      for (int u = 0; u < ReplicateConfig::kVecPerLane; ++u) {
        const int idx = u * 32 + lane;
        if (idx < num_vec) store_vec(dst + idx * 16, v[u]);
      }
    }
    return complete;
  } else {
    if (any_blocked(t.op, blocked)) return false;  // one store reaches all members: all or none
    char* dst = multicast_slice(p, t, bank);
#pragma unroll
    for (int u = 0; u < ReplicateConfig::kVecPerLane; ++u) {
      const int idx = u * 32 + lane;
      if (idx < num_vec) multimem_store_vec(dst + idx * 16, v[u]);
    }
    return true;
  }
}

// `num_ctas`: the copy CTAs of the rank (host-lane CTAs excluded).
template <StoreKind kStore>
__device__ bool copy_with_registers(const ReplicateParams& p, const int64_t* prefix,
                                    int64_t num_tasks, int w, int bank, const uint32_t* blocked,
                                    int num_ctas) {
  const int warp_idx = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  bool complete = true;
  int op_cursor = 0;
  for (int64_t task = static_cast<int64_t>(blockIdx.x) * num_warps + warp_idx; task < num_tasks;
       task += static_cast<int64_t>(num_ctas) * num_warps) {
    const SliceTask t = locate_task(p, prefix, w, bank, task, op_cursor);
    const int num_vec = t.bytes / 16;
    int4 v[ReplicateConfig::kVecPerLane];
#pragma unroll
    for (int u = 0; u < ReplicateConfig::kVecPerLane; ++u) {
      const int idx = u * 32 + lane;
      if (idx < num_vec) v[u] = load_vec(t.src + idx * 16);
    }
    if (!store_registers<kStore>(p, t, bank, blocked, v)) complete = false;
  }
  return complete;
}

// ---- bulk path -------------------------------------------------------------------------------

// One warp's pipeline: its tasks are first, first + stride, ...; task n uses stage n % stages
// (kept incrementally in 32-bit: no 64-bit division on the issue path).
struct WarpPipe {
  int64_t first = 0;
  int64_t stride = 0;
  int64_t count = 0;
  int stages = 0;
  int lag = 0;             // bulk groups left in flight before a stage is refilled
  int op_cursor = 0;       // locate_task's cursor for the loads (lane 0)
  char* buffer = nullptr;  // stages x 8 KiB
  uint64_t* bars = nullptr;
  SliceTask* tasks = nullptr;  // the task each stage holds (written by lane 0 with its load)

  __device__ char* stage(int s) const { return buffer + s * kSliceBytes; }
  __device__ uint64_t* bar(int s) const { return bars + s; }
};

__device__ __forceinline__ WarpPipe make_pipe(int64_t num_tasks, int stages, int num_ctas,
                                              char* dynamic_smem, uint64_t* all_bars,
                                              SliceTask* all_tasks) {
  const int warp_idx = static_cast<int>(threadIdx.x) / 32;
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  WarpPipe pipe;
  pipe.first = static_cast<int64_t>(blockIdx.x) * num_warps + warp_idx;
  pipe.stride = static_cast<int64_t>(num_ctas) * num_warps;
  pipe.count =
      pipe.first < num_tasks ? (num_tasks - pipe.first + pipe.stride - 1) / pipe.stride : 0;
  pipe.stages = stages;
  pipe.lag = min(max(stages / 2, stages > 1 ? 1 : 0), ReplicateConfig::kMaxBulkLag);
  pipe.buffer = dynamic_smem + static_cast<int64_t>(warp_idx) * stages * kSliceBytes;
  pipe.bars = all_bars + warp_idx * stages;
  pipe.tasks = all_tasks + warp_idx * stages;
  return pipe;
}

// Lane 0 only: loads task n into stage s and records the task there.
__device__ __forceinline__ void issue_load(const ReplicateParams& p, const int64_t* prefix,
                                           WarpPipe& pipe, int w, int bank, int64_t n, int s) {
  const SliceTask t = locate_task(p, prefix, w, bank, pipe.first + n * pipe.stride, pipe.op_cursor);
  pipe.tasks[s] = t;
  mbarrier_arrive_expect_tx(pipe.bar(s), static_cast<uint32_t>(t.bytes));
  bulk_load(pipe.stage(s), t.src, static_cast<uint32_t>(t.bytes), pipe.bar(s));
}

// Stores a slice held in shared memory. Peer: lane 0 issues one bulk store per member and
// commits them as one group. Multicast: the warp reads the stage and issues multimem stores.
// Returns false when a target was skipped (blocked by the reuse fence).
template <StoreKind kStore>
__device__ __forceinline__ bool store_stage(const ReplicateParams& p, const SliceTask& t, int bank,
                                            const uint32_t* blocked, const char* stage) {
  const int lane = threadIdx.x & 31;
  if constexpr (kStore == StoreKind::kPeer) {
    bool complete = true;
    for (int m = t.op.group_begin; m < t.op.group_begin + t.op.group_size; ++m) {
      if (test_bit(blocked, m)) {
        complete = false;
        continue;
      }
      if (lane == 0) {
        bulk_store(p.space.peer_bases[m] + t.slot_offset, stage, static_cast<uint32_t>(t.bytes));
      }
    }
    if (lane == 0) bulk_commit_group();
    return complete;
  } else {
    if (any_blocked(t.op, blocked)) return false;
    char* dst = multicast_slice(p, t, bank);
    const int num_vec = t.bytes / 16;
#pragma unroll
    for (int u = 0; u < ReplicateConfig::kVecPerLane; ++u) {
      const int idx = u * 32 + lane;
      if (idx < num_vec) {
        multimem_store_vec(dst + idx * 16, *reinterpret_cast<const int4*>(stage + idx * 16));
      }
    }
    fence_proxy_async_shared();  // these reads before the bulk load that refills the stage
    __syncwarp();
    return true;
  }
}

template <StoreKind kStore>
__device__ bool copy_with_bulk(const ReplicateParams& p, const int64_t* prefix, WarpPipe& pipe,
                               int w, int bank, const uint32_t* blocked) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  // NOTE: the reuse fence (fence_targets) acquired the members' releases with generic-proxy
  // loads, and bar.sync carried them to this warp; the bulk stores below are async-proxy writes
  // into the bank those releases freed. fence.proxy.async.global orders the acquire before them
  // (the host lane's member path makes the same fence after its acquire).
  if constexpr (kStore == StoreKind::kPeer) {
    if (lane == 0) fence_proxy_async_global();
  }
  bool complete = true;
  int s = 0;               // stage of task n
  uint32_t phase = 0;      // parity of that stage's current use
  int refill = -pipe.lag;  // stage of task n - lag (negative: none yet)
  for (int64_t n = 0; n < pipe.count; ++n) {
    mbarrier_wait(pipe.bar(s), phase);
    __syncwarp();  // lane 0's record of the task (written before its load) is visible
    const SliceTask t = pipe.tasks[s];
    if (!store_stage<kStore>(p, t, bank, blocked, pipe.stage(s))) complete = false;
    __syncwarp();  // every lane read the record before lane 0 may overwrite it below
    // Refill the stage of task r = n - lag (its stores are done reading) with task r + stages.
    const int64_t r = n - pipe.lag;
    if (lane == 0 && r >= 0 && r + pipe.stages < pipe.count) {
      if constexpr (kStore == StoreKind::kPeer) bulk_wait_read(pipe.lag);
      issue_load(p, prefix, pipe, w, bank, r + pipe.stages, refill);
    }
    if (++s == pipe.stages) {
      s = 0;
      phase ^= 1u;
    }
    if (++refill == pipe.stages) refill = 0;
  }
  if constexpr (kStore == StoreKind::kPeer) {
    if (lane == 0) bulk_wait_all_writes();
  }
  __syncwarp();
  return complete;
}

// ---- kernel ----------------------------------------------------------------------------------

struct ReplicateShared {
  int64_t prefix[kMaxLocalCopyOps + 1];
  int64_t warp_sums[ReplicateConfig::kMaxWarps];
  uint32_t targets[ReplicateConfig::kRankWords];
  uint32_t blocked[ReplicateConfig::kRankWords];
  uint64_t bars[ReplicateConfig::kMaxStages];
  SliceTask tasks[ReplicateConfig::kMaxStages];
  HostSlice host_slices[ReplicateConfig::kMaxStages];  // host-lane CTAs (bulk path)
};

template <StoreKind kStore, CopyPath kPath>
__global__ void __launch_bounds__(ReplicateConfig::kMaxThreads, 1)
    replicate_kernel(const ReplicateParams p) {
  __shared__ ReplicateShared shared;
  extern __shared__ __align__(128) char stage_buffer[];  // bulk path: warps x stages x 8 KiB

  const RankSpace& space = p.space;
  const runtime::RegionLayout& layout = space.layout;
  const int local_idx = p.local_begin + static_cast<int>(blockIdx.y);
  const int w = space.first_rank + local_idx;
  Scratch* scratch = space.scratch + local_idx;
  const uint64_t generation = resolve_generation(p.args.generation, &scratch->generation, true);
  const int bank = static_cast<int>(generation % static_cast<uint64_t>(layout.num_banks));
  const int64_t num_slices = (layout.bundle_bytes + kSliceBytes - 1) / kSliceBytes;
  // p2p-sami-host: the last host_ctas CTAs run the host lane; the copy CTAs move the head.
  const int copy_ctas =
      static_cast<int>(gridDim.x) - (p.args.host_slices > 0 ? p.args.host_ctas : 0);
  const bool host_cta = static_cast<int>(blockIdx.x) >= copy_ctas;

  scan_slice_counts(p, w, runtime::nvlink_slices(num_slices, p.args.host_slices), shared.prefix,
                    shared.warp_sums);
  const int64_t num_tasks = host_cta ? 0 : shared.prefix[p.args.num_ops];

  WarpPipe pipe;
  if constexpr (kPath == CopyPath::kBulk) {
    // NOTE: the first loads read only the owners' home bundles, never a helper bank, so they may
    // start before the reuse fence below has cleared the targets.
    pipe = make_pipe(num_tasks, p.stages, copy_ctas, stage_buffer, shared.bars, shared.tasks);
    if ((threadIdx.x & 31) == 0) {
      for (int s = 0; s < pipe.stages; ++s) mbarrier_init(pipe.bars + s, 1);
      fence_mbarrier_init();
      for (int n = 0; n < pipe.stages && n < pipe.count; ++n) {
        issue_load(p, shared.prefix, pipe, w, bank, n, n);
      }
    }
    __syncwarp();
  }

  bool cta_failed =
      fence_targets(space, p.args.ops, p.args.num_ops, p.args.mode_override, w, generation,
                    layout.num_banks, p.args.host_slices, shared.targets, shared.blocked, scratch);
  bool complete = true;
  if (host_cta) {
    const int warp_stages = static_cast<int>(threadIdx.x / 32) * pipe.stages;
    complete = run_host_lane<kPath>(p, w, bank, generation, shared.blocked,
                                    static_cast<int>(blockIdx.x) - copy_ctas, pipe.buffer,
                                    pipe.bars, shared.host_slices + warp_stages, scratch);
  } else if constexpr (kPath == CopyPath::kBulk) {
    complete = copy_with_bulk<kStore>(p, shared.prefix, pipe, w, bank, shared.blocked);
  } else {
    complete = copy_with_registers<kStore>(p, shared.prefix, num_tasks, w, bank, shared.blocked,
                                           copy_ctas);
  }
  if (!complete) cta_failed = true;
  publish_ready(space, w, generation, cta_failed, gridDim.x, scratch);
}

}  // namespace iser::cuda
