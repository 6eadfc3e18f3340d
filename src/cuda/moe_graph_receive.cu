// Graph-mode receive side (src/cuda/moe_graph_kernels.h): the headers of the P received blocks
// -> where each received row is computed (its slot and row in the [L][C] expert buffer) and
// where it sits in the received buffer. One CTA.
#include "cuda/launch_check.h"
#include "cuda/moe_graph_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(GraphReceiveConfig::kThreads)
    graph_receive_kernel(const GraphReceiveParams p) {
  extern __shared__ int32_t smem[];
  const GraphDims& d = p.dims;
  const int num_slots = d.slots_per_rank;
  const int entries = d.num_ranks * num_slots;
  const int tid = static_cast<int>(threadIdx.x);
  int32_t* rows = smem;                       // [P][L] rows source s sent for slot l (its header)
  int32_t* src_begin = rows + entries;        // [P][L] first position of slot l in source s's block
  int32_t* slot_begin = src_begin + entries;  // [P][L] first row of source s in slot l
  for (int x = tid; x < entries; x += blockDim.x) {
    const int src = x / num_slots;
    const auto* header =
        reinterpret_cast<const int32_t*>(p.recv + int64_t{src} * d.block_rows() * d.hidden);
    rows[x] = header[x % num_slots];
  }
  __syncthreads();

  // A header must describe at most peer_rows rows (a correct sender never sends more); one that
  // does not is dropped as a whole rather than read past its block.
  bool bad_header = false;
  for (int src = tid; src < d.num_ranks; src += blockDim.x) {
    int32_t* mine = rows + src * num_slots;
    int64_t run = 0;
    bool ok = true;
    for (int l = 0; l < num_slots; ++l) {
      ok = ok && mine[l] >= 0;
      src_begin[src * num_slots + l] = static_cast<int32_t>(run);
      run += mine[l] > 0 ? mine[l] : 0;
    }
    if (!ok || run > d.peer_rows) {
      bad_header = true;
      for (int l = 0; l < num_slots; ++l) {
        mine[l] = 0;
        src_begin[src * num_slots + l] = 0;
      }
    }
  }
  __syncthreads();
  bool overflow = false;
  for (int l = tid; l < num_slots; l += blockDim.x) {
    int run = 0;
    for (int src = 0; src < d.num_ranks; ++src) {
      slot_begin[src * num_slots + l] = run;
      run += rows[src * num_slots + l];
    }
    overflow = overflow || run > d.slot_rows;
    if (p.slot_total != nullptr) p.slot_total[l] = run < d.slot_rows ? run : d.slot_rows;
  }
  const bool any_bad_header = __syncthreads_or(bad_header);
  const bool any_overflow = __syncthreads_or(overflow);  // also orders slot_begin before its use
  if (tid == 0 && (any_bad_header || any_overflow)) {
    atomicOr(p.error_word,
             (any_bad_header ? kGraphBadHeader : 0u) | (any_overflow ? kGraphSlotOverflow : 0u));
  }

  // Each returned row: its slot is the last l whose first position is <= pos (src_begin is
  // non-decreasing in l), if pos falls inside that slot's rows.
  const int64_t total = d.return_rows();
  for (int64_t r = tid; r < total; r += blockDim.x) {
    const int src = static_cast<int>(r / d.peer_rows);
    const int pos = static_cast<int>(r % d.peer_rows);
    const int32_t* begins = src_begin + src * num_slots;
    int lo = 0;
    int hi = num_slots;  // first l with begins[l] > pos
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (begins[mid] > pos) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    const int l = lo - 1;
    int32_t recv_row = -1;
    int32_t expert_row = -1;
    if (l >= 0 && pos < begins[l] + rows[src * num_slots + l]) {
      const int c = slot_begin[src * num_slots + l] + (pos - begins[l]);
      if (c < d.slot_rows) {
        recv_row = static_cast<int32_t>(d.send_row(src, pos));
        expert_row = l * d.slot_rows + c;
      }
    }
    p.recv_row[r] = recv_row;
    p.expert_row[r] = expert_row;
  }
}

}  // namespace

void launch_graph_receive(const GraphReceiveParams& params, cudaStream_t stream) {
  using Config = GraphReceiveConfig;
  check_range(Config::smem_bytes(params.dims), 1, 48 * 1024, "graph_receive: smem");
  graph_receive_kernel<<<1, Config::kThreads, Config::smem_bytes(params.dims), stream>>>(params);
  ISER_CHECK_LAUNCH("graph_receive_kernel");
}

}  // namespace iser::cuda
