// A byte copy spread over the x dimension of a grid: the copy loop of the READY-fallback kernels
// (moe_fallback_copy.cu, moe_graph_fallback.cu), which refill one helper slot per blockIdx.y.
#pragma once

#include <cstdint>

#include "cuda/launch_check.h"

namespace iser::cuda {

// Copies `bytes` (a multiple of 16; both pointers 16-byte aligned) from src to dst with every
// thread of the blocks along x, one 16-byte vector per thread and step.
__device__ __forceinline__ void grid_x_copy(void* dst, const void* src, int64_t bytes) {
  ISER_DEVICE_ASSERT(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(src) % 16 == 0);
  const auto* from = static_cast<const uint4*>(src);
  auto* to = static_cast<uint4*>(dst);
  const int64_t num_vecs = bytes / 16;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_vecs;
       i += stride) {
    to[i] = from[i];
  }
}

}  // namespace iser::cuda
