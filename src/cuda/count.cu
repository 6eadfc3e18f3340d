// Launch unit of the count kernel.
#include <cuda_runtime.h>

#include "cuda/count.cuh"
#include "cuda/launch_check.h"

namespace iser::cuda {

int count_smem_bytes(const CountParams& params) {
  return count_smem_bytes(params.num_tiles, params.num_experts);
}

void prepare_count_kernel(int smem_bytes) {
  check_cuda(raise_dynamic_smem_limit(reinterpret_cast<const void*>(count_kernel), smem_bytes),
             "the count kernel's shared memory");
}

void launch_count(const CountParams& params, CUstream_st* stream) {
  if (params.num_tiles == 1) {  // decode sizes: the one-tile kernel (count.cuh)
    const auto smem = static_cast<size_t>(sizeof(int32_t) * params.num_experts);
    count_tile_kernel<<<dim3(1, static_cast<unsigned>(params.num_rows)), CountTileConfig::kThreads,
                        smem, stream>>>(params);
    ISER_CHECK_LAUNCH("count_tile_kernel");
    return;
  }
  const int ctas = count_ctas(params.num_tiles);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(params.num_rows));
  config.blockDim = dim3(CountConfig::kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(count_smem_bytes(params));
  config.stream = stream;
  // One cluster per row (count.cuh); a one-CTA row needs no cluster.
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(ctas);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = ctas > 1 ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, count_kernel, params), "launch of count_kernel");
}

}  // namespace iser::cuda
