// READY fallback of the EP MoE layer (src/moe/ep_layer.cpp): a helper slot whose replica the
// READY gate did not validate gets its expert's home bundle, read from the owner's symmetric
// memory. NOTE: the gate ran earlier on the same stream, so its slot_expert is visible here; the
// helper GEMMs run after this kernel on the same stream (or on lanes forked from it), so they
// read the refilled bytes. A late write of the timed-out replicate into the same slot stores the
// same bytes (a byte copy of the same home bundle), so it cannot change what the GEMMs read.
#include "cuda/grid_copy.cuh"
#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(FallbackCopyConfig::kThreads)
    fallback_copy_kernel(const FallbackCopyParams params) {
  const int slot = static_cast<int>(blockIdx.y);
  ISER_DEVICE_ASSERT(slot < FallbackCopyConfig::kMaxSlots);  // the launch checked num_slots
  const int32_t expert = params.expert[slot];
  if (expert < 0 || params.slot_expert[params.slot_base + slot] == expert) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(params.fallback_slots, 1u);
  grid_x_copy(params.dst[slot], params.src[slot], params.bytes);
}

}  // namespace

void launch_fallback_copy(const FallbackCopyParams& params, cudaStream_t stream) {
  using Config = FallbackCopyConfig;
  // Callers build the params from a validated configuration; a bad one is an internal error.
  check_range(params.num_slots, 0, Config::kMaxSlots, "fallback_copy: num_slots");
  check_range(params.bytes % 16, 0, 0, "fallback_copy: bytes % 16");
  if (params.num_slots == 0 || params.bytes == 0) return;
  const dim3 grid(Config::kBlocksPerSlot, static_cast<unsigned>(params.num_slots));
  fallback_copy_kernel<<<grid, Config::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("fallback_copy_kernel");
}

}  // namespace iser::cuda
