// Launch unit of the count kernel.
#include <cuda_runtime.h>

#include "cuda/count.cuh"

namespace iser::cuda {

int launch_count(const CountParams& params, CUstream_st* stream) {
  const dim3 grid(params.num_tiles, params.num_rows);
  const size_t smem = sizeof(int32_t) * static_cast<size_t>(params.num_experts);
  count_kernel<<<grid, CountConfig::kThreads, smem, stream>>>(params);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace iser::cuda
