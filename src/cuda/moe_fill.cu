// Deterministic pseudo-random bf16 fill: element i gets a value that depends on (seed, i) only,
// so a slot filled on any device, in any launch shape, holds the same bytes.
#include <cuda_bf16.h>

#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"

namespace iser::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void __launch_bounds__(FillUniformConfig::kThreads)
    fill_uniform_kernel(const FillUniformParams params) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < params.num_elems; i += stride) {
    const uint64_t bits =
        splitmix64(params.seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull));
    // 24 random bits -> [0, 1) exactly representable in fp32.
    const float unit = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
    const __nv_bfloat16 value = __float2bfloat16_rn((2.0f * unit - 1.0f) * params.scale);
    params.out[i] = __bfloat16_as_ushort(value);
  }
}

}  // namespace

void launch_fill_uniform(const FillUniformParams& params, cudaStream_t stream) {
  if (params.num_elems <= 0) return;
  using Config = FillUniformConfig;
  const int64_t blocks = (params.num_elems + Config::kThreads - 1) / Config::kThreads;
  const int grid = static_cast<int>(blocks < Config::kMaxBlocks ? blocks : Config::kMaxBlocks);
  fill_uniform_kernel<<<grid, Config::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("fill_uniform_kernel");
}

}  // namespace iser::cuda
