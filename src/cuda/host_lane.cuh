// Host lane of p2p-sami-host (cuda/host_lane.h) inside the replication kernel: the host-lane
// CTAs (after the copy CTAs) stage the tail of the owner's ops in pinned host memory, or fetch it
// from there into the member's helper slot, one 32-KiB chunk (one flag) at a time.
//
// Two paths (RuntimeConfig::host_path):
//  - bulk (with the bulk copy path, sm_90): lane 0 of each warp runs a pipeline of the copy
//    shape's 8-KiB shared-memory stages over its chunks' slices: cp.async.bulk loads (home or
//    staging -> shared) and bulk stores (shared -> staging, or the helper slot), so a warp keeps
//    up to `stages` slices of PCIe reads or writes in flight; a chunk's flag trails its last store
//    by kHostFlagLag bulk groups.
//  - registers: the whole warp copies a slice through registers, half a slice (4 KiB) at a time,
//    one chunk after the other.
#pragma once

#include <type_traits>

#include "cuda/bulk_copy.cuh"
#include "cuda/host_lane.h"
#include "cuda/kernels.h"
#include "cuda/replicate_base.cuh"
#include "cuda/sync.cuh"

namespace iser::cuda {

// ---- common ----------------------------------------------------------------------------------

// The host-lane slices [first, end) of chunk `chunk` (lane indices: 0 = the op's slice
// nvlink_slices).
struct HostChunk {
  int64_t first;
  int64_t end;
};

__device__ __forceinline__ HostChunk host_chunk(int64_t chunk, int64_t host_slices) {
  const int64_t first = chunk * runtime::kHostChunkSlices;
  return {first, min(first + runtime::kHostChunkSlices, host_slices)};
}

// The chunks of one worker (a warp, or a bulk pipeline) of the host-lane CTAs of rank w, in run
// order: the rank's ops' chunks (op order, then chunk order; owner roles stage, member roles
// fetch) are dealt round-robin to the workers of all host-lane CTAs.
struct HostWalk {
  int64_t my_worker = 0;
  int64_t all_workers = 0;
  int64_t num_chunks = 0;  // per op
  int k = -1;              // current op
  int64_t first_task = 0;  // the rank's host-lane chunks before op k
  int64_t chunk = 0;       // current chunk of op k
  CopyOp op;
  runtime::HostRole role = runtime::HostRole::kNone;
  int64_t area = 0;          // op's staging area
  bool own_blocked = false;  // w is a member and the reuse fence blocked it
  bool all_blocked = false;  // the reuse fence blocked every member

  // Moves to the worker's next chunk; false when none is left.
  __device__ bool next(const ReplicateParams& p, int w, int bank, const uint32_t* blocked) {
    if (k >= 0) {
      chunk += all_workers;
      if (chunk < num_chunks) return true;
      first_task += num_chunks;
    }
    for (++k; k < p.args.num_ops; ++k) {
      op = p.args.ops[k];
      role = runtime::host_role(op, w, p.args.host_slices);
      if (role == runtime::HostRole::kNone) continue;
      chunk = ((my_worker - first_task) % all_workers + all_workers) % all_workers;
      if (chunk >= num_chunks) {
        first_task += num_chunks;
        continue;
      }
      area = p.args.staging_layout.area(bank, op.helper, op.group_begin);
      own_blocked =
          (w >= op.group_begin && w < op.group_begin + op.group_size) && test_bit(blocked, w);
      all_blocked = true;
      for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
        all_blocked = all_blocked && test_bit(blocked, m);
      }
      return true;
    }
    return false;
  }
};

// Worker `worker` of `workers_per_cta` of the host-lane CTA `host_cta`.
__device__ __forceinline__ HostWalk make_host_walk(const ReplicateParams& p, int host_cta,
                                                   int worker, int workers_per_cta) {
  HostWalk walk;
  walk.my_worker = static_cast<int64_t>(host_cta) * workers_per_cta + worker;
  walk.all_workers = static_cast<int64_t>(p.args.host_ctas) * workers_per_cta;
  walk.num_chunks = runtime::host_lane_chunks(p.args.host_slices);
  return walk;
}

__device__ __forceinline__ uint64_t* host_flag(const ReplicateParams& p, int64_t area,
                                               int64_t chunk) {
  return reinterpret_cast<uint64_t*>(p.args.staging + p.args.staging_layout.flag(area, chunk));
}

// First slice of the head/tail split: the op's slice of host-lane slice 0.
__device__ __forceinline__ int64_t host_lane_head(const ReplicateParams& p) {
  const runtime::RegionLayout& layout = p.space.layout;
  return runtime::nvlink_slices((layout.bundle_bytes + kSliceBytes - 1) / kSliceBytes,
                                p.args.host_slices);
}

// ---- registers -------------------------------------------------------------------------------

// One warp copies `bytes` (<= one slice) from `src` to `dst`, and to `dst2` unless null, in two
// halves of 8 x 16 B per lane (half the registers of a whole slice: the host lane shares the
// kernel's register budget with the copy paths).
__device__ __forceinline__ void warp_copy_slice(const char* src, char* dst, char* dst2, int bytes) {
  constexpr int kHalf = ReplicateConfig::kVecPerLane / 2;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int num_vec = bytes / 16;
#pragma unroll 1
  for (int base = 0; base < ReplicateConfig::kVecPerLane * 32; base += kHalf * 32) {
    int4 v[kHalf];
#pragma unroll
    for (int u = 0; u < kHalf; ++u) {
      const int idx = base + u * 32 + lane;
      if (idx < num_vec) v[u] = load_vec(src + idx * 16);
    }
#pragma unroll
    for (int u = 0; u < kHalf; ++u) {
      const int idx = base + u * 32 + lane;
      if (idx < num_vec) {
        store_vec(dst + idx * 16, v[u]);
        if (dst2 != nullptr) store_vec(dst2 + idx * 16, v[u]);
      }
    }
  }
}

// Owner w stages chunk `chunk` of `op` into its staging area (and into its own helper slot when it
// is a member), then publishes the chunk's flag: 2g + 1, or 2g when `skip` (every member is
// blocked by the reuse fence: the area may still be read by a late member of g - num_banks).
// Whole warp. Returns false when a write was skipped.
// NOTE: every lane's staging stores precede __syncwarp (memory ordering among the warp's
// threads); lane 0's fence.acq_rel.sys then orders them before its st.release.sys of the flag,
// which is cumulative: a member whose ld.acquire.sys reads 2g + 1 sees every byte of the chunk.
// The stores are posted PCIe writes; the system-scope fence is what makes them visible first.
__device__ bool stage_chunk(const ReplicateParams& p, const CopyOp& op, int w, int bank,
                            int64_t area, int64_t chunk, uint64_t generation, bool skip,
                            bool own_blocked) {
  const runtime::RegionLayout& layout = p.space.layout;
  const int64_t head = host_lane_head(p);
  const bool own = !skip && !own_blocked && runtime::owner_in_group(op);
  const char* home =
      p.space.peer_bases[w] + layout.home_slot(p.args.layer, op.expert % layout.experts_per_rank);
  char* slot = p.space.peer_bases[w] + layout.helper_slot(bank, op.helper);
  const HostChunk c = host_chunk(chunk, p.args.host_slices);
  if (!skip) {
    for (int64_t s = c.first; s < c.end; ++s) {
      const int64_t begin = (head + s) * kSliceBytes;
      const int bytes = static_cast<int>(min(kSliceBytes, layout.bundle_bytes - begin));
      warp_copy_slice(home + begin, p.args.staging + p.args.staging_layout.data(area, s),
                      own ? slot + begin : nullptr, bytes);
    }
  }
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    fence_acq_rel_sys();
    store_release_sys(host_flag(p, area, chunk), 2 * generation + (skip ? 0 : 1));
  }
  return !skip && (own || !runtime::owner_in_group(op));
}

// Member w (not the owner) waits for the owner's flag of chunk `chunk` of `op` (acquire, until
// `deadline`) and copies the chunk from the staging area into its own helper slot. Whole warp.
// Returns false (and reports) when the chunk never arrived, arrived as failed, or w's slot is
// blocked by the reuse fence.
// NOTE: every lane acquires the flag itself (one coalesced load per poll), so each lane's staging
// loads are ordered after an acquire that read the owner's release of 2g + 1.
__device__ bool fetch_chunk(const ReplicateParams& p, const CopyOp& op, int w, int bank,
                            int64_t area, int64_t chunk, uint64_t generation, bool own_blocked,
                            uint64_t deadline, Scratch* scratch) {
  if (own_blocked) return false;  // fence_targets reported it
  const runtime::RegionLayout& layout = p.space.layout;
  const int64_t head = host_lane_head(p);
  const uint64_t* flag = host_flag(p, area, chunk);
  const uint64_t want = 2 * generation + 1;
  const uint64_t value = wait_at_least(flag, want - 1, deadline);
  if (!__all_sync(0xffffffffu, value == want)) {
    if ((threadIdx.x & 31) == 0) {
      report(scratch,
             static_cast<uint32_t>(value > want ? StatusCode::kReadyOvertaken
                                                : StatusCode::kHostLaneTimeout),
             op.owner, generation);
    }
    return false;
  }
  char* slot = p.space.peer_bases[w] + layout.helper_slot(bank, op.helper);
  const HostChunk c = host_chunk(chunk, p.args.host_slices);
  for (int64_t s = c.first; s < c.end; ++s) {
    const int64_t begin = (head + s) * kSliceBytes;
    const int bytes = static_cast<int>(min(kSliceBytes, layout.bundle_bytes - begin));
    warp_copy_slice(p.args.staging + p.args.staging_layout.data(area, s), slot + begin, nullptr,
                    bytes);
  }
  return true;
}

// NOTE: no cycle of waits: a fetch of (op k, chunk c) waits only for the owner's stage of (k, c),
// which on the owner's warp follows only chunks of earlier (op, chunk) pairs; by induction every
// wait ends, provided all CTAs of all ranks are resident (the runtime checks this in logical
// mode; with one process per GPU each rank's kernel runs on its own GPU).
__device__ __noinline__ bool host_lane_registers(const ReplicateParams& p, int w, int bank,
                                                 uint64_t generation, const uint32_t* blocked,
                                                 int host_cta, Scratch* scratch) {
  const uint64_t deadline = globaltimer_ns() + p.space.timeout_ns;
  HostWalk walk = make_host_walk(p, host_cta, static_cast<int>(threadIdx.x / 32),
                                 static_cast<int>(blockDim.x / 32));
  bool complete = true;
  while (walk.next(p, w, bank, blocked)) {
    const bool ok = walk.role == runtime::HostRole::kStage
                        ? stage_chunk(p, walk.op, w, bank, walk.area, walk.chunk, generation,
                                      walk.all_blocked, walk.own_blocked)
                        : fetch_chunk(p, walk.op, w, bank, walk.area, walk.chunk, generation,
                                      walk.own_blocked, deadline, scratch);
    complete = complete && ok;
  }
  return complete;
}

// ---- bulk ------------------------------------------------------------------------------------

// A chunk's flag is released once `kFlagLag` bulk groups (slices) were stored after its last one:
// waiting for the completion of a write to host memory takes microseconds, so a worker keeps
// that many slices of writes in flight past a finished chunk.
inline constexpr int kHostFlagRing = 16;  // > kFlagLag + 1: flags pending at most

// One slice of the bulk host lane, recorded by lane 0 with its load.
struct HostSlice {
  char* dst;       // staging (stage role) or the member's helper slot (fetch role)
  char* dst2;      // the owner's own helper slot (owner inside its group), else null
  uint64_t* flag;  // the chunk's flag when this is its last staged slice, else null
  int32_t bytes;
};

// Staged chunks whose flags wait for their stores (flag and last bulk group), oldest first.
struct HostFlagRing {
  uint64_t* flag[kHostFlagRing] = {};
  int group[kHostFlagRing] = {};
  int head = 0;
  int tail = 0;

  __device__ void push(uint64_t* chunk_flag, int last_group) {
    flag[tail % kHostFlagRing] = chunk_flag;
    group[tail % kHostFlagRing] = last_group;
    ++tail;
  }
  // Of `stored` committed bulk groups, waits for all but the `kPending` most recent and releases
  // (`ready`) the flags whose groups completed.
  template <int kPending>
  __device__ void release(int stored, uint64_t ready) {
    const int done = stored - 1 - kPending;  // groups <= done are complete after the wait
    if (head == tail || group[head % kHostFlagRing] > done) return;
    bulk_wait_writes<kPending>();
    fence_proxy_async_global();
    fence_acq_rel_sys();
    while (head != tail && group[head % kHostFlagRing] <= done) {
      store_release_sys(flag[head % kHostFlagRing], ready);
      ++head;
    }
  }
};

// One thread (lane 0 of a warp) runs worker `worker` of `workers` of the host-lane CTA `host_cta`:
// the worker's chunks (HostWalk) as one slice stream through `num_stages` 8-KiB shared-memory
// stages (`buffer`, mbarriers `bars`, records `records`; initialised by the kernel as for the
// copy path). A stage is refilled once the bulk store of the slice `lag` stores back has read it
// (as in copy_with_bulk).
// NOTE (memory ordering):
//  - owner: the bulk stores of a chunk into the staging area (and its own slot) are async-proxy
//    writes. cp.async.bulk.wait_group N returns once every group but the N most recent completed,
//    i.e. its writes were performed; fence.proxy.async.global orders them before lane 0's later
//    generic-proxy operations; fence.acq_rel.sys + st.release.sys of the flag (cumulative) then
//    make them visible to a member whose ld.acquire.sys reads 2g + 1.
//  - member: lane 0's ld.acquire.sys reads 2g + 1, then fence.proxy.async.global orders that
//    acquire before its later async-proxy operations: the bulk loads of the chunk from staging.
//    Its bulk stores into its own slot are waited for (wait_group 0 + proxy fence) before READY
//    (publish_ready's release pattern), as in copy_with_bulk.
//  - staging reuse: a member's loads of generation g complete (mbarrier) before its stores, so
//    before its READY g; the owner of g + num_banks writes the area only after its reuse fence
//    saw every writer's READY g.
//  - no cycle of waits: lane 0 blocks on a flag only with no slice in flight and every earlier
//    chunk's flag released (wait_group 0 first), so the induction of host_lane_registers holds.
template <int kFlagLag>
__device__ __noinline__ bool host_lane_bulk(const ReplicateParams& p, int w, int bank,
                                            uint64_t generation, const uint32_t* blocked,
                                            int host_cta, int worker, int workers, int num_stages,
                                            char* buffer, uint64_t* bars, HostSlice* records,
                                            Scratch* scratch) {
  static_assert(kFlagLag + 1 < kHostFlagRing);
  const runtime::RegionLayout& layout = p.space.layout;
  const int64_t head = host_lane_head(p);
  const uint64_t ready = 2 * generation + 1;
  const uint64_t deadline = globaltimer_ns() + p.space.timeout_ns;
  const int lag = min(max(num_stages / 2, num_stages > 1 ? 1 : 0), ReplicateConfig::kMaxBulkLag);
  HostWalk walk = make_host_walk(p, host_cta, worker, workers);
  bool complete = true;

  // The current chunk: its slices [next, end) still to load, as offsets from the bases.
  int64_t next = 0;
  int64_t end = 0;
  const char* src = nullptr;  // slice s at src + s * kSliceBytes (likewise dst, dst2)
  char* dst = nullptr;
  char* dst2 = nullptr;
  uint64_t* flag = nullptr;  // the chunk's flag
  bool staged = false;       // stage role (else fetch)
  bool await_flag = false;   // fetch role: the flag is not acquired yet
  bool walk_done = false;
  int loaded = 0;  // slices loaded (stage loaded % num_stages)
  int stored = 0;  // slices stored = bulk groups committed

  HostFlagRing ring;

  // Opens the worker's next chunk with slices to move; false when none is left.
  auto open_chunk = [&]() {
    while (walk.next(p, w, bank, blocked)) {
      const CopyOp& op = walk.op;
      const HostChunk c = host_chunk(walk.chunk, p.args.host_slices);
      flag = host_flag(p, walk.area, walk.chunk);
      char* slot = p.space.peer_bases[w] + layout.helper_slot(bank, op.helper) + head * kSliceBytes;
      char* staging = p.args.staging + p.args.staging_layout.data(walk.area, 0);
      staged = walk.role == runtime::HostRole::kStage;
      if (staged) {
        if (walk.all_blocked) {
          // The area may still be read by a late member of g - num_banks: publish "skipped".
          store_release_sys(flag, 2 * generation);
          complete = false;
          continue;
        }
        const bool own = !walk.own_blocked && runtime::owner_in_group(op);
        if (runtime::owner_in_group(op) && !own) complete = false;
        src = p.space.peer_bases[w] +
              layout.home_slot(p.args.layer, op.expert % layout.experts_per_rank) +
              head * kSliceBytes;
        dst = staging;
        dst2 = own ? slot : nullptr;
      } else {
        if (walk.own_blocked) {  // fence_targets reported it
          complete = false;
          continue;
        }
        src = staging;
        dst = slot;
        dst2 = nullptr;
        await_flag = true;
      }
      next = c.first;
      end = c.end;
      return true;
    }
    return false;
  };

  // Loads slices while a stage is free (at first all of them; later the stage of the slice
  // `lag` stores back).
  auto issue_loads = [&]() {
    while (loaded < max(num_stages, stored + num_stages - lag)) {
      if (next == end) {
        if (walk_done || !open_chunk()) {
          walk_done = true;
          return;
        }
        continue;
      }
      if (await_flag) {
        uint64_t value = load_acquire_sys(flag);
        if (value < ready - 1) {
          if (stored < loaded) return;  // store what is in flight first
          ring.release<0>(stored, ready);
          value = wait_at_least(flag, ready - 1, deadline);
        }
        if (value != ready) {
          report(scratch,
                 static_cast<uint32_t>(value > ready ? StatusCode::kReadyOvertaken
                                                     : StatusCode::kHostLaneTimeout),
                 walk.op.owner, generation);
          complete = false;
          next = end;
          continue;
        }
        fence_proxy_async_global();  // the acquire before the chunk's bulk loads
        await_flag = false;
      }
      const int s = loaded % num_stages;
      if (loaded >= num_stages) bulk_wait_read(stored - 1 - (loaded - num_stages));
      const int64_t offset = next * kSliceBytes;
      const int bytes =
          static_cast<int>(min(kSliceBytes, layout.bundle_bytes - (head + next) * kSliceBytes));
      records[s] = {dst + offset, dst2 != nullptr ? dst2 + offset : nullptr,
                    staged && next + 1 == end ? flag : nullptr, bytes};
      mbarrier_arrive_expect_tx(bars + s, static_cast<uint32_t>(bytes));
      bulk_load(buffer + s * kSliceBytes, src + offset, static_cast<uint32_t>(bytes), bars + s);
      ++loaded;
      ++next;
    }
  };

  issue_loads();
  while (stored < loaded) {
    const int s = stored % num_stages;
    mbarrier_wait(bars + s, static_cast<uint32_t>(stored / num_stages) & 1u);
    const HostSlice r = records[s];
    const char* stage = buffer + s * kSliceBytes;
    bulk_store(r.dst, stage, static_cast<uint32_t>(r.bytes));
    if (r.dst2 != nullptr) bulk_store(r.dst2, stage, static_cast<uint32_t>(r.bytes));
    bulk_commit_group();
    if (r.flag != nullptr) ring.push(r.flag, stored);
    ++stored;
    ring.release<kFlagLag>(stored, ready);
    issue_loads();
  }
  ring.release<0>(stored, ready);
  bulk_wait_all_writes();  // the member's slot stores, before READY
  return complete;
}

// The host-lane CTA `host_cta` of rank w (blockIdx.x - copy CTAs). Bulk copy path and host_path
// kBulk: lane 0 of each warp runs host_lane_bulk on the warp's stages (`buffer`, `bars`,
// `records`: the warp's); else host_lane_registers.
// (Measured, docs/benchmarks.md: a worker's rate is set by its per-chunk chain, not by its stages;
// fewer workers with deeper pipelines, e.g. 4 per CTA of 4-8 stages each, were slower than one per
// warp, so the workers are the warps.)
template <CopyPath kPath>
__device__ bool run_host_lane(const ReplicateParams& p, int w, int bank, uint64_t generation,
                              const uint32_t* blocked, int host_cta, char* buffer, uint64_t* bars,
                              HostSlice* records, Scratch* scratch) {
  if (kPath != CopyPath::kBulk || p.args.host_path != CopyPath::kBulk) {
    return host_lane_registers(p, w, bank, generation, blocked, host_cta, scratch);
  }
  bool complete = true;
  if ((threadIdx.x & 31) == 0) {
    complete = host_lane_bulk<ReplicateConfig::kHostFlagLag>(
        p, w, bank, generation, blocked, host_cta, static_cast<int>(threadIdx.x / 32),
        static_cast<int>(blockDim.x / 32), p.stages, buffer, bars, records, scratch);
  }
  return __shfl_sync(0xffffffffu, complete ? 1 : 0, 0) != 0;
}

}  // namespace iser::cuda
