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

namespace {

template <int kTiles>
void launch_cluster(const cudaLaunchConfig_t& config, const CountParams& params) {
  check_cuda(cudaLaunchKernelEx(&config, count_cluster_kernel<kTiles>, params),
             "launch of count_cluster_kernel");
}

}  // namespace

void launch_count(const CountParams& params, CUstream_st* stream) {
  if (params.num_tiles == 1) {  // decode sizes: the one-tile kernel (count.cuh)
    const auto smem = static_cast<size_t>(sizeof(int32_t) * params.num_experts);
    count_tile_kernel<<<dim3(1, static_cast<unsigned>(params.num_rows)), CountConfig::kThreads,
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
  // One cluster per row (count.cuh): num_tiles >= 2 here, so at least two CTAs.
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(ctas);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  // Up to kMaxTilesPerCta tiles per CTA: the compile-time form (count.cuh; the same shared
  // memory, count_smem_bytes); longer rows: count_kernel.
  static_assert(CountConfig::kMaxTilesPerCta == 4);
  switch (count_tiles_per_cta(params.num_tiles)) {
    case 1:
      return launch_cluster<1>(config, params);
    case 2:
      return launch_cluster<2>(config, params);
    case 3:
      return launch_cluster<3>(config, params);
    case 4:
      return launch_cluster<4>(config, params);
    default:
      check_cuda(cudaLaunchKernelEx(&config, count_kernel, params), "launch of count_kernel");
  }
}

}  // namespace iser::cuda
