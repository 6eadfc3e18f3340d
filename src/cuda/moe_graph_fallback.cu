// Graph-mode READY fallback (src/cuda/moe_graph_kernels.h): refills this rank's helper slots that
// the READY gate did not validate, reading the slot's op from the device copy list (the host
// never sees the plan in graph mode). NOTE: ordering as in moe_fallback_copy.cu: the gate's
// slot_expert is visible (stream/event order), the helper GEMMs run after this kernel, and a late
// write of the timed-out replication stores the same bytes.
#include <climits>

#include "cuda/grid_copy.cuh"
#include "cuda/launch_check.h"
#include "cuda/moe_graph_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(GraphFallbackConfig::kThreads)
    graph_fallback_kernel(const GraphFallbackParams p) {
  __shared__ int op_idx;
  const int helper = static_cast<int>(blockIdx.y);
  if (threadIdx.x == 0) op_idx = INT_MAX;
  __syncthreads();
  // Helper indices of one plan are distinct per rank (coloring), so at most one op matches.
  for (int k = threadIdx.x; k < p.max_ops; k += blockDim.x) {
    const CopyOp op = p.ops[k];
    const bool member =
        op.group_size > 0 && p.rank >= op.group_begin && p.rank < op.group_begin + op.group_size;
    if (member && op.helper == helper) atomicMin(&op_idx, k);
  }
  __syncthreads();
  if (op_idx == INT_MAX) return;
  const CopyOp op = p.ops[op_idx];
  if (op.owner < 0 || op.owner >= p.num_ranks || op.expert / p.experts_per_rank != op.owner ||
      p.slot_expert[p.rank * p.num_slots + helper] == op.expert) {
    return;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(p.fallback_slots, 1u);
  grid_x_copy(p.dst[helper],
              p.home_base[op.owner] + (op.expert % p.experts_per_rank) * p.home_stride, p.bytes);
}

}  // namespace

void launch_graph_fallback(const GraphFallbackParams& params, cudaStream_t stream) {
  using Config = GraphFallbackConfig;
  // Built from a validated configuration at set-up; a bad one is an internal error.
  check_range(params.num_slots, 0, Config::kMaxSlots, "graph_fallback: num_slots");
  check_range(params.num_ranks, 1, Config::kMaxRanks, "graph_fallback: num_ranks");
  check_range(params.bytes % 16, 0, 0, "graph_fallback: bytes % 16");
  check_range(params.home_stride % 16, 0, 0, "graph_fallback: home_stride % 16");
  if (params.num_slots == 0 || params.bytes == 0 || params.max_ops == 0) return;
  const dim3 grid(Config::kBlocksPerSlot, static_cast<unsigned>(params.num_slots));
  graph_fallback_kernel<<<grid, Config::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("graph_fallback_kernel");
}

}  // namespace iser::cuda
