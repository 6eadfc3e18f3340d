// Dispatch inside one process: copy token rows into the slot-ordered expert input.
#include <cuda_bf16.h>

#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(GatherRowsConfig::kThreads)
    gather_rows_kernel(const GatherRowsParams params) {
  const int vecs = params.hidden / GatherRowsConfig::kVec;
  const auto* src = reinterpret_cast<const uint4*>(params.src);
  auto* dst = reinterpret_cast<uint4*>(params.dst);
  for (int64_t row = blockIdx.x; row < params.num_rows; row += gridDim.x) {
    const int64_t from = params.row_map[row];
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) dst[row * vecs + v] = src[from * vecs + v];
  }
}

}  // namespace

void launch_gather_rows(const GatherRowsParams& params, cudaStream_t stream) {
  check_range(params.hidden % GatherRowsConfig::kVec, 0, 0, "gather_rows: hidden % 8");
  if (params.num_rows <= 0) return;
  const int grid = static_cast<int>(params.num_rows < 65535 ? params.num_rows : 65535);
  gather_rows_kernel<<<grid, GatherRowsConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace iser::cuda
