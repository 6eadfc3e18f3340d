// Bitwise comparison of two bf16 buffers (a count of differing elements). Used to admit a
// cublasLt algorithm only where it gives the pinned algorithm's exact bytes.
#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(CountMismatchesConfig::kThreads)
    count_mismatches_kernel(const CountMismatchesParams params) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t local = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < params.num_elems; i += stride) {
    local += params.a[i] != params.b[i] ? 1u : 0u;
  }
  // NOTE: exact below 2^32 mismatches per counter; the launcher caps num_elems at 2^31.
  if (local != 0) atomicAdd(params.mismatches, local);
}

}  // namespace

void launch_count_mismatches(const CountMismatchesParams& params, cudaStream_t stream) {
  using Config = CountMismatchesConfig;
  check_range(params.num_elems, 0, int64_t{1} << 31, "count_mismatches: num_elems");
  if (params.num_elems == 0) return;
  const int64_t blocks = (params.num_elems + Config::kThreads - 1) / Config::kThreads;
  const int grid = static_cast<int>(blocks < Config::kMaxBlocks ? blocks : Config::kMaxBlocks);
  count_mismatches_kernel<<<grid, Config::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("count_mismatches_kernel");
}

}  // namespace iser::cuda
