// READY gate, home fallback and bank release (docs/design.md §9).
#include "cuda/kernels.h"
#include "cuda/sync.cuh"
#include "cuda/writers.h"

namespace iser::cuda {
namespace {

constexpr int kRankWords = 1024 / 32;

struct GateConfig {
  static constexpr int kThreads = 256;
};

struct GateParams {
  RankSpace space;
  const CopyOp* ops;
  int32_t num_ops;
  uint64_t generation;
  int32_t* slot_expert;   // [num_local][P*S]
  int32_t mode_override;  // as in ReplicateArgs: who wrote each op
};

// Calls f(rank) for every writer of `op` under `mode` (cuda/writers.h: the owner of an
// owner-direct op, the members of a SAMI op, the members and an owner outside the group of an
// owner-assisted SAMI op).
template <typename F>
__device__ __forceinline__ void for_each_writer(const CopyOp& op, TransportMode mode, F&& f) {
  for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
    if (runtime::op_writer(op, mode, m).idx >= 0) f(m);
  }
  if (!runtime::owner_in_group(op) && runtime::op_writer(op, mode, op.owner).idx >= 0) f(op.owner);
}

// Waits for the writers of every op (under the same mode override the replicate call used).
// Null ops (group_size 0, the padding of a device copy list) have no writer and validate nothing.
// A replica is valid only when all its writers published exactly 2g+1 (drained, not failed);
// otherwise its routes fall back home.
// NOTE: a rank acquires 2g+1 before it rewrites a route to (d, H+h); the writer's release is
// cumulative over its stores to d, and d computes only on routes it receives after that decision
// (causality order through the dispatch), so d reads the replica's bytes, never stale ones.
__global__ void __launch_bounds__(GateConfig::kThreads) ready_gate_kernel(const GateParams p) {
  __shared__ uint32_t needed[kRankWords];
  __shared__ uint32_t ok[kRankWords];
  const RankSpace& space = p.space;
  const runtime::RegionLayout& layout = space.layout;
  const int local_idx = static_cast<int>(blockIdx.x);
  const int rank = space.first_rank + local_idx;
  const int num_ranks = layout.num_ranks;
  const int num_slots = layout.num_slots;
  Scratch* scratch = space.scratch + local_idx;
  for (int i = threadIdx.x; i < kRankWords; i += blockDim.x) {
    needed[i] = 0;
    ok[i] = 0;
  }
  __syncthreads();
  for (int k = threadIdx.x; k < p.num_ops; k += blockDim.x) {
    const CopyOp op = p.ops[k];
    if (op.group_size <= 0) continue;  // a null op (plan_copy_list's padding): no writer
    for_each_writer(op, runtime::effective_mode(op, p.mode_override),
                    [&](int w) { atomicOr(&needed[w >> 5], 1u << (w & 31)); });
  }
  __syncthreads();
  const auto* flags =
      reinterpret_cast<const uint64_t*>(space.peer_bases[rank] + layout.ready_flags);
  const uint64_t generation = resolve_generation(p.generation, &scratch->generation, false);
  // NOTE: kDeviceGeneration takes the generation the rank's last replicate *finished*. A gate
  // that is not stream-ordered after its replicate may find the previous generation there and
  // would validate the slots being rewritten now against the new copy list; it finds that
  // generation already gated, reports it and validates nothing (every route falls back home).
  const uint64_t last_gated = scratch->gated;
  const bool early =
      p.generation == kDeviceGeneration && (generation == 0 || generation <= last_gated);
  __syncthreads();  // every thread read `gated` before it is advanced below
  if (threadIdx.x == 0) {
    if (early) {
      report(scratch, static_cast<uint32_t>(StatusCode::kGateEarly), rank, generation);
    } else if (generation > last_gated) {
      scratch->gated = generation;
    }
  }
  const uint64_t want = 2 * generation + 1;
  const uint64_t deadline = globaltimer_ns() + space.timeout_ns;
  for (int w = threadIdx.x; w < num_ranks; w += blockDim.x) {
    if (early || !((needed[w >> 5] >> (w & 31)) & 1u)) continue;
    const uint64_t value = wait_at_least(flags + w, want - 1, deadline);
    if (value == want) {
      atomicOr(&ok[w >> 5], 1u << (w & 31));
    } else {
      const StatusCode code = value < want - 1    ? StatusCode::kReadyTimeout
                              : value == want - 1 ? StatusCode::kCopyFailed
                                                  : StatusCode::kReadyOvertaken;
      report(scratch, static_cast<uint32_t>(code), w, generation);
    }
  }
  int32_t* out = p.slot_expert + static_cast<int64_t>(local_idx) * num_ranks * num_slots;
  for (int i = threadIdx.x; i < num_ranks * num_slots; i += blockDim.x) out[i] = -1;
  __syncthreads();
  for (int k = threadIdx.x; k < p.num_ops; k += blockDim.x) {
    const CopyOp op = p.ops[k];
    if (op.group_size <= 0) continue;
    bool valid = true;
    for_each_writer(op, runtime::effective_mode(op, p.mode_override),
                    [&](int w) { valid = valid && ((ok[w >> 5] >> (w & 31)) & 1u); });
    if (!valid) continue;
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      out[m * num_slots + op.helper] = op.expert;
    }
  }
}

struct FallbackConfig {
  static constexpr int kThreads = 256;
  static constexpr int kMaxBlocks = 1024;
};

struct FallbackParams {
  RankSpace space;
  const int32_t* slot_expert;  // [num_local][P*S]
  const int32_t* expert_ids;   // [num_local][routes]
  int32_t* slot_ids;           // [num_local][routes]
  int64_t routes_per_rank;
};

// A route whose helper slot holds no valid replica of its expert goes to the expert's home slot.
__global__ void __launch_bounds__(FallbackConfig::kThreads)
    fallback_rewrite_kernel(const FallbackParams p) {
  const runtime::RegionLayout& layout = p.space.layout;
  const int local_idx = static_cast<int>(blockIdx.y);
  const int h = layout.experts_per_rank;
  const int slots_per_rank = h + layout.num_slots;
  const int32_t* valid =
      p.slot_expert + static_cast<int64_t>(local_idx) * layout.num_ranks * layout.num_slots;
  const int64_t base = static_cast<int64_t>(local_idx) * p.routes_per_rank;
  unsigned long long rewritten = 0;
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       n < p.routes_per_rank; n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t slot = p.slot_ids[base + n];
    if (slot < 0) continue;
    const int dst_rank = slot / slots_per_rank;
    const int local_slot = slot % slots_per_rank;
    if (local_slot < h) continue;
    const int32_t expert = p.expert_ids[base + n];
    if (valid[dst_rank * layout.num_slots + (local_slot - h)] == expert) continue;
    p.slot_ids[base + n] = (expert / h) * slots_per_rank + expert % h;
    ++rewritten;
  }
  const unsigned long long warp_total =
      __reduce_add_sync(0xffffffffu, static_cast<unsigned>(rewritten));
  if ((threadIdx.x & 31) == 0 && warp_total > 0) {
    atomicAdd(&p.space.scratch[local_idx].fallback_routes, warp_total);
  }
}

struct ReleaseParams {
  RankSpace space;
  uint64_t generation;
};

// NOTE: stream order puts this after the consumer's kernels (their reads of the bank are done);
// the release store tells every writer the bank of `generation` may be overwritten.
__global__ void release_bank_kernel(const ReleaseParams p) {
  const int local_idx = static_cast<int>(blockIdx.x);
  const int rank = p.space.first_rank + local_idx;
  Scratch* scratch = p.space.scratch + local_idx;
  const uint64_t generation = resolve_generation(p.generation, &scratch->generation, false);
  // NOTE: as in the gate: a kDeviceGeneration release that finds a generation already released
  // ran before its replicate; it reports that and releases nothing (no stale release either).
  const uint64_t last_released = scratch->released;
  __syncthreads();
  if (p.generation == kDeviceGeneration && (generation == 0 || generation <= last_released)) {
    if (threadIdx.x == 0) {
      report(scratch, static_cast<uint32_t>(StatusCode::kGateEarly), rank, generation);
    }
    return;
  }
  if (threadIdx.x == 0 && generation > last_released) scratch->released = generation;
  for (int d = threadIdx.x; d < p.space.layout.num_ranks; d += blockDim.x) {
    auto* flag =
        reinterpret_cast<uint64_t*>(p.space.peer_bases[d] + p.space.layout.consumed_flags) + rank;
    store_release_sys(flag, generation);
  }
}

}  // namespace

void launch_ready_gate(const RankSpace& space, const CopyOp* ops, int num_ops, uint64_t generation,
                       int32_t* slot_expert, int32_t mode_override, int num_local,
                       cudaStream_t stream) {
  GateParams params{space, ops, num_ops, generation, slot_expert, mode_override};
  ready_gate_kernel<<<num_local, GateConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("ready_gate_kernel");
}

void launch_fallback_rewrite(const RankSpace& space, const int32_t* slot_expert,
                             const int32_t* expert_ids, int32_t* slot_ids, int64_t routes_per_rank,
                             int num_local, cudaStream_t stream) {
  if (routes_per_rank <= 0) return;
  const int64_t blocks =
      (routes_per_rank + FallbackConfig::kThreads - 1) / FallbackConfig::kThreads;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks, FallbackConfig::kMaxBlocks)),
                  static_cast<unsigned>(num_local));
  FallbackParams params{space, slot_expert, expert_ids, slot_ids, routes_per_rank};
  fallback_rewrite_kernel<<<grid, FallbackConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("fallback_rewrite_kernel");
}

void launch_release_bank(const RankSpace& space, uint64_t generation, int num_local,
                         cudaStream_t stream) {
  ReleaseParams params{space, generation};
  release_bank_kernel<<<num_local, 128, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("release_bank_kernel");
}

void preload_gate_kernels() {
  preload_functions({reinterpret_cast<const void*>(&ready_gate_kernel),
                     reinterpret_cast<const void*>(&fallback_rewrite_kernel),
                     reinterpret_cast<const void*>(&release_bank_kernel)});
}

}  // namespace iser::cuda
