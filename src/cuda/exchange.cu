// Count exchange without the host (docs/design.md §9): every rank stores its count row into every
// peer's symmetric region and stamps it with the epoch; readers acquire all P stamps and copy the
// matrix out.
#include "cuda/kernels.h"
#include "cuda/replicate_base.cuh"
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
  int32_t local_begin;  // blockIdx.x + local_begin = local rank
};

// NOTE: rows are double-buffered by epoch parity, and each row carries a stamp: the epoch it
// holds (count_stamps[parity][s], stored with release after the row). A reader of epoch e takes
// row s only when its stamp is exactly e. Progress flags (count_flags[s] = the epoch s started)
// are published first, before any row: epoch E's launch begins after epoch E-1's copy-out
// finished (stream order), so progress E says "done reading parity E&1's row of epoch E-2".
//  - No tearing: source s overwrites parity E&1 in rank d's region only once d's progress shows
//    E-1 (acquire on s's side). While no wait times out that always holds (s saw d's stamp of
//    E-1, stored after d's progress E-1); after a timeout, when s runs ahead of a stalled d, s
//    skips d (leaves its row and stamp there alone).
//  - No stale rows: d waits for the stamp to read exactly e. A stamp past e, or s's progress past
//    e (s's epoch-e launch is over, so it delivered or skipped for good) with a stamp below e,
//    is reported as kCountOvertaken; no stamp by the deadline stays kCountTimeout.
__device__ __forceinline__ uint64_t* count_stamp(const RankSpace& space, int region, int parity,
                                                 int src_rank) {
  return reinterpret_cast<uint64_t*>(space.peer_bases[region] + space.layout.count_stamps) +
         parity * space.layout.num_ranks + src_rank;
}

__global__ void __launch_bounds__(CountExchangeConfig::kThreads)
    count_exchange_kernel(const CountExchangeParams p) {
  const RankSpace& space = p.space;
  const runtime::RegionLayout& layout = space.layout;
  const int local_idx = p.local_begin + static_cast<int>(blockIdx.x);
  const int rank = space.first_rank + local_idx;
  const int num_ranks = layout.num_ranks;
  const int num_experts = layout.num_experts;
  Scratch* scratch = space.scratch + local_idx;
  const uint64_t epoch = resolve_generation(p.epoch, &scratch->epoch, true);
  const int parity = static_cast<int>(epoch & 1);
  const int32_t* row = p.rows + static_cast<int64_t>(local_idx) * num_experts;
  const auto* progress =
      reinterpret_cast<const uint64_t*>(space.peer_bases[rank] + layout.count_flags);
  __shared__ uint32_t deliver[ReplicateConfig::kRankWords];

  // 1. Publish my progress to every rank, then find who is done reading this parity's previous
  //    row (epoch - 2).
  for (int d = threadIdx.x; d < num_ranks; d += blockDim.x) {
    auto* flag = reinterpret_cast<uint64_t*>(space.peer_bases[d] + layout.count_flags) + rank;
    store_release_sys(flag, epoch);
  }
  for (int d = threadIdx.x; d < ReplicateConfig::kRankWords; d += blockDim.x) deliver[d] = 0;
  __syncthreads();
  for (int d = threadIdx.x; d < num_ranks; d += blockDim.x) {
    if (epoch <= 2 || load_acquire_sys(progress + d) + 1 >= epoch) {
      atomicOr(&deliver[d >> 5], 1u << (d & 31));
    }
  }
  __syncthreads();
  // 2. Push my row to each of them (myself included).
  const int64_t total = static_cast<int64_t>(num_ranks) * num_experts;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int dst_rank = static_cast<int>(i / num_experts);
    if (!test_bit(deliver, dst_rank)) continue;
    const int expert_idx = static_cast<int>(i % num_experts);
    auto* dst =
        reinterpret_cast<int32_t*>(space.peer_bases[dst_rank] + layout.count_row(parity, rank));
    dst[expert_idx] = row[expert_idx];
  }
  __syncthreads();
  // 3. Stamp the rows (release, system scope; cumulative over the CTA's stores via bar.sync).
  for (int d = threadIdx.x; d < num_ranks; d += blockDim.x) {
    if (test_bit(deliver, d)) store_release_sys(count_stamp(space, d, parity, rank), epoch);
  }
  // 4. Wait for every source's row of exactly this epoch (acquire).
  const uint64_t deadline = globaltimer_ns() + space.timeout_ns;
  for (int s = threadIdx.x; s < num_ranks; s += blockDim.x) {
    const uint64_t* stamp = count_stamp(space, rank, parity, s);
    uint64_t value = load_acquire_sys(stamp);
    bool moved_on = false;
    while (value < epoch) {
      moved_on = load_acquire_sys(progress + s) > epoch;
      value = load_acquire_sys(stamp);  // after `moved_on`: final when s moved on
      if (moved_on || globaltimer_ns() > deadline) break;
      __nanosleep(64);
    }
    if (value != epoch) {
      report(scratch,
             static_cast<uint32_t>(value > epoch || moved_on ? StatusCode::kCountOvertaken
                                                             : StatusCode::kCountTimeout),
             s, epoch);
    }
  }
  __syncthreads();
  // 5. Copy the matrix out (rows of missing ranks are stale; the status says which).
  const auto* src =
      reinterpret_cast<const int32_t*>(space.peer_bases[rank] + layout.count_row(parity, 0));
  int32_t* out = p.matrix + static_cast<int64_t>(local_idx) * total;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) out[i] = src[i];
  // Every thread read the counter (resolve_generation) before the barriers above.
  if (threadIdx.x == 0) scratch->epoch = epoch;
}

}  // namespace

void launch_count_exchange(const RankSpace& space, const int32_t* rows, int32_t* matrix,
                           uint64_t epoch, int local_begin, int local_end, cudaStream_t stream) {
  CountExchangeParams params{space, rows, matrix, epoch, local_begin};
  count_exchange_kernel<<<local_end - local_begin, CountExchangeConfig::kThreads, 0, stream>>>(
      params);
  ISER_CHECK_LAUNCH("count_exchange_kernel");
}

void preload_exchange_kernels() {
  preload_functions({reinterpret_cast<const void*>(&count_exchange_kernel)});
}

}  // namespace iser::cuda
