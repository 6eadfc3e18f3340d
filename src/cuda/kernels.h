// Host-side launch helpers of the runtime kernels (src/cuda/*.cu). CUDA types only, no device
// code: included by src/runtime and the tests. Launch helpers return cudaGetLastError(); callers
// check it (argument validation happens in src/runtime, where iser::Error is formatted).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "iser/runtime.h"
#include "runtime/layout.h"

namespace iser::cuda {

// Per-local-rank device scratch (not symmetric): status word and grid-completion counter.
struct Scratch {
  uint32_t code;  // StatusCode; the first error wins
  int32_t peer;
  uint64_t tag;
  unsigned long long fallback_routes;
  uint32_t replicate_arrivals;  // CTAs of the current replicate launch that drained
  uint32_t replicate_failed;    // a CTA skipped writes (reuse fence timeout)
};

// What every runtime kernel needs to find the ranks' symmetric regions.
struct RankSpace {
  char* const* peer_bases = nullptr;  // device array [P]: rank r's region as mapped here
  runtime::RegionLayout layout;
  int32_t first_rank = 0;      // global rank of local rank 0 (blockIdx.y adds)
  Scratch* scratch = nullptr;  // device array [num_local]
  uint64_t timeout_ns = 0;
};

enum class StoreKind : int32_t { kPeer = 0, kMulticast = 1 };

struct ReplicateArgs {
  const CopyOp* ops = nullptr;
  int32_t num_ops = 0;
  int32_t layer = 0;
  int32_t bank = 0;
  uint64_t generation = 0;
  int32_t mode_override = -1;  // -1: as each op says; else kCopyModeDirect / kCopyModeSami
  StoreKind store = StoreKind::kPeer;
  char* const* multicast_bases = nullptr;  // device array, multicast_group_index -> object
};

// Replicate + publish READY for local ranks [local_begin, local_end), num_sms CTAs each.
cudaError_t launch_replicate(const RankSpace& space, const ReplicateArgs& args, int local_begin,
                             int local_end, int num_sms, cudaStream_t stream);
// Copy-engine helpers: the reuse fence (marks the generation failed on timeout) and the READY
// publication after the copies.
cudaError_t launch_copy_engine_fence(const RankSpace& space, const CopyOp* ops, int num_ops,
                                     uint64_t generation, int num_banks, int num_local,
                                     cudaStream_t stream);
cudaError_t launch_publish_ready(const RankSpace& space, uint64_t generation, int num_local,
                                 cudaStream_t stream);

cudaError_t launch_count_exchange(const RankSpace& space, const int32_t* rows, int32_t* matrix,
                                  uint64_t epoch, int num_local, cudaStream_t stream);
cudaError_t launch_ready_gate(const RankSpace& space, const CopyOp* ops, int num_ops,
                              uint64_t generation, int32_t* slot_expert, int32_t mode_override,
                              int num_local, cudaStream_t stream);
cudaError_t launch_fallback_rewrite(const RankSpace& space, const int32_t* slot_expert,
                                    const int32_t* expert_ids, int32_t* slot_ids,
                                    int64_t routes_per_rank, int num_local, cudaStream_t stream);
cudaError_t launch_release_bank(const RankSpace& space, uint64_t generation, int num_local,
                                cudaStream_t stream);

size_t scratch_bytes();

}  // namespace iser::cuda
