// Host-side launch helpers of the runtime kernels (src/cuda/*.cu). CUDA types only, no device
// code: included by src/runtime and the tests. Launch helpers throw iser::Error on a launch
// error (cuda/launch_check.h, the CUDA layer's one convention); argument validation happens in
// src/runtime, where iser::Error is formatted.
#pragma once

#include <cstdint>
#include <initializer_list>

#include <cuda_runtime.h>

#include "cuda/host_lane.h"
#include "cuda/launch_check.h"
#include "cuda/region_layout.h"
#include "iser/copy_list.h"
#include "iser/replication.h"

namespace iser::cuda {

// Per-local-rank device scratch (not symmetric): status word, grid-completion counter and the
// device-side generation counters (kDeviceGeneration). clear_status() clears the status words
// only (everything before `replicate_arrivals`).
// NOTE: never the completion counters: a clear that landed after some CTAs of a launch arrived
// would keep that launch (and, off by those arrivals, every later one) from knowing its last CTA.
struct Scratch {
  uint32_t code;  // StatusCode; the first error wins
  int32_t peer;
  uint64_t tag;
  unsigned long long fallback_routes;
  uint32_t replicate_arrivals;  // CTAs of the current replicate launch that drained
  uint32_t replicate_failed;    // a CTA skipped writes (reuse fence timeout)
  uint64_t generation;          // the last generation this rank's replicate published
  uint64_t epoch;               // the last epoch of this rank's count exchange
  uint64_t gated;               // the newest generation a READY gate of this rank validated
  uint64_t released;            // the newest generation this rank's consumer released
};

// What every runtime kernel needs to find the ranks' symmetric regions.
struct RankSpace {
  char* const* peer_bases = nullptr;  // device array [P]: rank r's region as mapped here
  runtime::RegionLayout layout;
  int32_t first_rank = 0;      // global rank of local rank 0 (blockIdx.y adds)
  Scratch* scratch = nullptr;  // device array [num_local]
  uint64_t timeout_ns = 0;
};

// The replicate kernel's last step for one slice, a template parameter of the kernel: a store to
// each member's peer-mapped slot, or one multimem store to the group's multicast object. Internal
// (no Transport selects kMulticast: the runtime binds no multicast objects); it names an
// instruction, not a way of moving a bundle (that is TransportMode / Transport).
enum class StoreKind : int32_t { kPeer = 0, kMulticast = 1 };

// How a copy CTA moves slices (RuntimeConfig::copy_path / copy_warps / copy_stages, resolved).
struct CopyShape {
  CopyPath path = CopyPath::kBulk;
  int32_t warps = 0;
  int32_t stages = 0;  // bulk path: 8-KiB shared-memory stages per warp
};

struct ReplicateArgs {
  const CopyOp* ops = nullptr;
  int32_t num_ops = 0;
  int32_t layer = 0;
  uint64_t generation = 0;  // kDeviceGeneration: the rank's last generation + 1 (bank g % banks)
  // runtime::kNoModeOverride: as each op says; else a TransportMode (cuda/writers.h)
  int32_t mode_override = -1;
  StoreKind store = StoreKind::kPeer;
  char* const* multicast_bases = nullptr;  // device array, multicast_group_index -> object
  // p2p-sami-host (cuda/host_lane.h): the tail of host_slices slices of every op goes through
  // `staging` (pinned host memory as mapped on this device) on host_ctas extra CTAs per rank.
  int64_t host_slices = 0;
  int32_t host_ctas = 0;
  CopyPath host_path = CopyPath::kBulk;  // kBulk: on the copy shape's stages (bulk path only)
  char* staging = nullptr;
  runtime::StagingLayout staging_layout;
};

// Replicate + publish READY for local ranks [local_begin, local_end), num_sms CTAs each (plus
// args.host_ctas host-lane CTAs when args.host_slices > 0).
void launch_replicate(const RankSpace& space, const ReplicateArgs& args, int local_begin,
                      int local_end, int num_sms, const CopyShape& shape, cudaStream_t stream);
// The shape a configuration asks for, with its defaults filled in.
CopyShape resolve_copy_shape(CopyPath path, int warps, int stages);
// Copy-engine helpers: the reuse fence (marks the generation failed on timeout) and the READY
// publication after the copies.
void launch_copy_engine_fence(const RankSpace& space, const CopyOp* ops, int num_ops,
                              uint64_t generation, int num_banks, int num_local,
                              cudaStream_t stream);
void launch_publish_ready(const RankSpace& space, uint64_t generation, int num_local,
                          cudaStream_t stream);

// The count the exchange kernel may do first (Runtime::count_and_exchange): every local rank's
// topk ids [num_local][num_routes] -> tile counts [num_local][tiles][E] (as the count kernel's)
// and, when rows != nullptr, its count row [num_local][E].
struct ExchangeCount {
  const int32_t* topk_ids = nullptr;
  int32_t num_routes = 0;
  int32_t* rows = nullptr;
  int32_t* tile_counts = nullptr;
  uint32_t* error_word = nullptr;
};
// Count exchange of local ranks [local_begin, local_end) (rows/matrix indexed from local rank 0);
// with count.topk_ids set, each rank's row is counted in the kernel (`rows` is then unused).
void launch_count_exchange(const RankSpace& space, const int32_t* rows, int32_t* matrix,
                           uint64_t epoch, int local_begin, int local_end, cudaStream_t stream,
                           const ExchangeCount& count = {});
void launch_ready_gate(const RankSpace& space, const CopyOp* ops, int num_ops, uint64_t generation,
                       int32_t* slot_expert, int32_t mode_override, int num_local,
                       cudaStream_t stream);
void launch_fallback_rewrite(const RankSpace& space, const int32_t* slot_expert,
                             const int32_t* expert_ids, int32_t* slot_ids, int64_t routes_per_rank,
                             int num_local, cudaStream_t stream);
void launch_release_bank(const RankSpace& space, uint64_t generation, int num_local,
                         cudaStream_t stream);

size_t scratch_bytes();

// Forces every runtime kernel to load now (cudaFuncGetAttributes). NOTE: with lazy module loading
// (CUDA's default), the first launch of a kernel loads it, which may wait for kernels already
// running; a spin-waiting kernel (the READY gate, the count exchange) launched for the first time
// while a peer stream is stalled would then wait for that stall instead of timing out.
inline void preload_functions(std::initializer_list<const void*> kernels) {
  cudaFuncAttributes attributes{};
  for (const void* kernel : kernels) {
    check_cuda(cudaFuncGetAttributes(&attributes, kernel), "loading a runtime kernel");
  }
}
void preload_replicate_kernels();
void preload_exchange_kernels();
void preload_gate_kernels();

}  // namespace iser::cuda
