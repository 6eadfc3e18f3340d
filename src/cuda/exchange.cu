// Count exchange without the host (docs/design.md §9): every rank stores its count row into every
// peer's symmetric region, then publishes the epoch; readers acquire all P epochs and copy the
// matrix out.
#include "cuda/kernels.h"
#include "cuda/sync.cuh"

namespace iser::cuda {
namespace {

struct CountExchangeConfig {
  static constexpr int kThreads = 256;
};

struct CountExchangeParams {
  RankSpace space;
  const int32_t* rows;  // [num_local][E]
  int32_t* matrix;      // [num_local][P][E]
  uint64_t epoch;
};

// NOTE: rows are double-buffered by epoch parity. A writer reaches epoch e+1 only after it saw
// every rank's epoch e flag, and each rank publishes epoch e after it finished copying epoch
// e-1's matrix out (stream order), so parity (e+1)&1 is free when it is overwritten.
__global__ void __launch_bounds__(CountExchangeConfig::kThreads)
    count_exchange_kernel(const CountExchangeParams p) {
  const RankSpace& space = p.space;
  const runtime::RegionLayout& layout = space.layout;
  const int local_idx = static_cast<int>(blockIdx.x);
  const int rank = space.first_rank + local_idx;
  const int num_ranks = layout.num_ranks;
  const int num_experts = layout.num_experts;
  Scratch* scratch = space.scratch + local_idx;
  const uint64_t epoch = resolve_generation(p.epoch, &scratch->epoch, true);
  const int parity = static_cast<int>(epoch & 1);
  const int32_t* row = p.rows + static_cast<int64_t>(local_idx) * num_experts;

  // 1. Push my row to every rank (myself included).
  const int64_t total = static_cast<int64_t>(num_ranks) * num_experts;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int dst_rank = static_cast<int>(i / num_experts);
    const int expert_idx = static_cast<int>(i % num_experts);
    auto* dst =
        reinterpret_cast<int32_t*>(space.peer_bases[dst_rank] + layout.count_row(parity, rank));
    dst[expert_idx] = row[expert_idx];
  }
  __syncthreads();
  // 2. Publish the epoch (release, system scope; cumulative over the CTA's stores via bar.sync).
  for (int d = threadIdx.x; d < num_ranks; d += blockDim.x) {
    auto* flag = reinterpret_cast<uint64_t*>(space.peer_bases[d] + layout.count_flags) + rank;
    store_release_sys(flag, epoch);
  }
  // 3. Wait for every source's epoch (acquire).
  const auto* flags =
      reinterpret_cast<const uint64_t*>(space.peer_bases[rank] + layout.count_flags);
  const uint64_t deadline = globaltimer_ns() + space.timeout_ns;
  for (int s = threadIdx.x; s < num_ranks; s += blockDim.x) {
    if (wait_at_least(flags + s, epoch, deadline) < epoch) {
      report(scratch, static_cast<uint32_t>(StatusCode::kCountTimeout), s, epoch);
    }
  }
  __syncthreads();
  // 4. Copy the matrix out (rows of missing ranks are stale; the status says which).
  const auto* src =
      reinterpret_cast<const int32_t*>(space.peer_bases[rank] + layout.count_row(parity, 0));
  int32_t* out = p.matrix + static_cast<int64_t>(local_idx) * total;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) out[i] = src[i];
  // Every thread read the counter (resolve_generation) before the barrier above.
  if (threadIdx.x == 0) scratch->epoch = epoch;
}

}  // namespace

cudaError_t launch_count_exchange(const RankSpace& space, const int32_t* rows, int32_t* matrix,
                                  uint64_t epoch, int num_local, cudaStream_t stream) {
  CountExchangeParams params{space, rows, matrix, epoch};
  count_exchange_kernel<<<num_local, CountExchangeConfig::kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t preload_exchange_kernels() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&count_exchange_kernel));
}

}  // namespace iser::cuda
