// Graph-mode row moves (src/cuda/moe_graph_kernels.h): the send gather, the scatter of received
// rows into their slots and the gather of outputs back into the returned order, over a fixed
// number of rows whose maps say which ones are used.
#include "cuda/launch_check.h"
#include "cuda/moe_graph_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(MapRowsConfig::kThreads) map_rows_kernel(const MapRowsParams p) {
  const int vecs = p.hidden / MapRowsConfig::kVec;
  const auto* src = reinterpret_cast<const uint4*>(p.src);
  auto* dst = reinterpret_cast<uint4*>(p.dst);
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const int64_t from = p.src_map != nullptr ? p.src_map[row] : row;
    const int64_t to = p.dst_map != nullptr ? p.dst_map[row] : row;
    if (from < 0 || to < 0) continue;
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) dst[to * vecs + v] = src[from * vecs + v];
  }
}

}  // namespace

void launch_map_rows(const MapRowsParams& params, cudaStream_t stream) {
  using Config = MapRowsConfig;
  check_range(params.hidden % Config::kVec, 0, 0, "map_rows: hidden % 8");
  if (params.num_rows <= 0) return;
  const int grid =
      static_cast<int>(params.num_rows < Config::kMaxBlocks ? params.num_rows : Config::kMaxBlocks);
  map_rows_kernel<<<grid, Config::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("map_rows_kernel");
}

}  // namespace iser::cuda
