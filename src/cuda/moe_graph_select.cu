// Graph-mode size-aware GEMMs (src/cuda/moe_graph_kernels.h): sets each slot's switch node to the
// smallest captured row bucket that holds the slot's rows, or past the last one (skip) when the
// slot is empty. NOTE: one thread per handle (concurrent sets of one handle are undefined); the
// switch nodes run after this kernel in graph order, so they read these values.
#include "cuda/launch_check.h"
#include "cuda/moe_graph_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(GraphSelectConfig::kThreads)
    graph_select_kernel(const GraphSelectParams p) {
  for (int l = static_cast<int>(threadIdx.x); l < p.num_slots; l += blockDim.x) {
    const int32_t rows = p.slot_total[l];
    int value = p.num_buckets;
    if (rows > 0) {
      value = p.num_buckets - 1;  // the last bucket holds C rows, every slot's maximum
      for (int b = p.num_buckets - 1; b >= 0; --b) {
        if (p.bucket_rows[b] >= rows) value = b;
      }
    }
    cudaGraphSetConditional(p.handles[l], static_cast<unsigned>(value));
  }
}

}  // namespace

void launch_graph_select(const GraphSelectParams& params, cudaStream_t stream) {
  using Config = GraphSelectConfig;
  check_range(params.num_slots, 1, Config::kMaxSlots, "graph_select: num_slots");
  check_range(params.num_buckets, 1, Config::kMaxBuckets, "graph_select: num_buckets");
  graph_select_kernel<<<1, Config::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("graph_select_kernel");
}

}  // namespace iser::cuda
