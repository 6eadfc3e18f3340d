// Launch unit of the route-rewrite kernel.
#include <cuda_runtime.h>

#include "cuda/launch_check.h"
#include "cuda/rewrite.cuh"

namespace iser::cuda {

int rewrite_smem_bytes(const RewriteParams& params) {
  return static_cast<int>(sizeof(int32_t)) *
         rewrite_detail::rewrite_smem_words(params.num_experts, params.max_broadcasts,
                                            params.num_ranks);
}

void prepare_rewrite_kernel(int smem_bytes) {
  check_cuda(raise_dynamic_smem_limit(reinterpret_cast<const void*>(rewrite_kernel), smem_bytes),
             "the rewrite kernel's shared memory");
}

void launch_rewrite(const RewriteParams& params, CUstream_st* stream) {
  const dim3 grid(params.num_tiles * params.num_parts, params.num_rows);
  rewrite_kernel<<<grid, RewriteConfig::kThreads, rewrite_smem_bytes(params), stream>>>(params);
  ISER_CHECK_LAUNCH("rewrite_kernel");
}

}  // namespace iser::cuda
