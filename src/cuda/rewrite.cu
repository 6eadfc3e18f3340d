// Launch unit of the route-rewrite kernel.
#include <cuda_runtime.h>

#include "cuda/rewrite.cuh"

namespace iser::cuda {

int rewrite_smem_bytes(const RewriteParams& params) {
  return static_cast<int>(sizeof(int32_t)) *
         rewrite_detail::rewrite_smem_words(params.num_experts, params.max_broadcasts,
                                            params.num_ranks);
}

int prepare_rewrite_kernel(int smem_bytes) {
  return static_cast<int>(cudaFuncSetAttribute(
      rewrite_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
}

int launch_rewrite(const RewriteParams& params, CUstream_st* stream) {
  // Programmatic dependent launch: the rewrite may start while the previous kernel (the
  // planner, which allows it at its start) runs, loads its ids and waits for the planner's
  // completion in griddepcontrol.wait before reading the plan (rewrite.cuh). Stream-capturable.
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.num_tiles, params.num_rows);
  config.blockDim = dim3(RewriteConfig::kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(rewrite_smem_bytes(params));
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = params.programmatic ? 1 : 0;
  return static_cast<int>(cudaLaunchKernelEx(&config, rewrite_kernel, params));
}

}  // namespace iser::cuda
