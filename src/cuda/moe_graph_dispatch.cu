// Graph-mode dispatch (src/cuda/moe_graph_kernels.h): a rank's routes -> positions in the fixed
// per-destination blocks, the blocks' headers and the row maps of the send gather and the
// combine. One CTA: a decode-size batch has at most tau * k <= a few thousand routes.
#include "cuda/launch_check.h"
#include "cuda/moe_graph_kernels.h"

namespace iser::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Global slot of route i, -1 for none. `bad` is set for an id outside [-1, E).
__device__ __forceinline__ int route_slot(const GraphDispatchParams& p, int i, bool refused,
                                          bool& bad) {
  const GraphDims& d = p.dims;
  const int h = d.experts_per_rank;
  const int32_t expert = p.topk_ids[i];
  if (expert < -1 || expert >= d.num_ranks * h) {
    bad = true;
    return -1;
  }
  if (expert < 0) return -1;
  const int home = (expert / h) * d.slots_per_rank + expert % h;
  if (p.slot_ids == nullptr) return home;
  const int32_t slot = p.slot_ids[i];
  // NOTE: a refused copy list validates no replica, so no route may use a helper slot; a slot
  // outside the topology (never written by a correct rewrite) also goes home.
  if (slot < 0 || slot >= d.total_slots()) return home;
  if (refused && slot % d.slots_per_rank >= h) return home;
  return slot;
}

__global__ void __launch_bounds__(GraphDispatchConfig::kThreads)
    graph_dispatch_kernel(const GraphDispatchParams p) {
  extern __shared__ int32_t smem[];
  const GraphDims& d = p.dims;
  const int num_slots = d.total_slots();
  const int num_routes = d.num_tokens * d.top_k;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  int32_t* count = smem;                 // [num_slots] routes per global slot
  int32_t* begin = smem + num_slots;     // [num_slots] position of the slot's first route
  int32_t* ordinal = begin + num_slots;  // [num_routes] rank of the route within its slot
  const bool refused = p.num_ops != nullptr && *p.num_ops < 0;
  for (int g = tid; g < num_slots; g += blockDim.x) count[g] = 0;
  for (int64_t w = tid; w < d.exchange_rows(); w += blockDim.x) p.send_token[w] = -1;
  __syncthreads();

  // Pass 1 (warp 0): ordinals in route order, so positions sort stably by (slot, token, j).
  bool bad = false;
  if (tid < 32) {
    const unsigned lanes_below = (1u << lane) - 1u;
    for (int base = 0; base < num_routes; base += 32) {
      const int i = base + lane;
      const int slot = i < num_routes ? route_slot(p, i, refused, bad) : -1;
      const unsigned peers = __match_any_sync(kFullMask, slot);
      const int before = slot >= 0 ? count[slot] : 0;
      __syncwarp();
      if (slot >= 0 && lane == __ffs(peers) - 1) count[slot] = before + __popc(peers);
      if (i < num_routes) ordinal[i] = before + __popc(peers & lanes_below);
      __syncwarp();
    }
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGraphBadExpertId);

  // Pass 2: per destination, slot begins (exclusive prefix) and the block's header.
  // NOTE: a destination's routes are this rank's routes to it, at most tau * k = peer_rows, so
  // every position below is inside the block.
  for (int dest = tid; dest < d.num_ranks; dest += blockDim.x) {
    int run = 0;
    for (int l = 0; l < d.slots_per_rank; ++l) {
      begin[dest * d.slots_per_rank + l] = run;
      run += count[dest * d.slots_per_rank + l];
    }
  }
  for (int g = tid; g < num_slots; g += blockDim.x) {
    const int dest = g / d.slots_per_rank;
    auto* header = reinterpret_cast<int32_t*>(p.send + int64_t{dest} * d.block_rows() * d.hidden);
    header[g % d.slots_per_rank] = count[g];
  }
  __syncthreads();

  // Pass 3: every route's wire row and returned row.
  for (int i = tid; i < num_routes; i += blockDim.x) {
    bool ignored = false;
    const int slot = route_slot(p, i, refused, ignored);
    if (slot < 0) {
      p.route_row[i] = -1;
      continue;
    }
    const int dest = slot / d.slots_per_rank;
    const int pos = begin[slot] + ordinal[i];
    p.send_token[d.send_row(dest, pos)] = i / d.top_k;
    p.route_row[i] = dest * d.peer_rows + pos;
  }
}

}  // namespace

void launch_graph_dispatch(const GraphDispatchParams& params, cudaStream_t stream) {
  using Config = GraphDispatchConfig;
  // graph_dims validated the shape at set-up; a bad one here is an internal error.
  check_range(Config::smem_bytes(params.dims), 1, Config::kMaxSmemBytes, "graph_dispatch: smem");
  check_range(params.dims.header_rows * 2LL * params.dims.hidden - 4LL * params.dims.slots_per_rank,
              0, 1LL << 40, "graph_dispatch: header bytes - 4 L");
  graph_dispatch_kernel<<<1, Config::kThreads, Config::smem_bytes(params.dims), stream>>>(params);
  ISER_CHECK_LAUNCH("graph_dispatch_kernel");
}

}  // namespace iser::cuda
