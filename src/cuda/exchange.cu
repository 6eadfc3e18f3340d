// Count exchange without the host (docs/design.md §9): every rank stores its count row into every
// peer's symmetric region and stamps it with the epoch; readers acquire all P stamps and copy the
// matrix out. Optionally the kernel counts the rank's topk ids first (count_and_exchange: one
// launch instead of count + exchange at decode sizes), with the count kernel's outputs.
#include "cuda/count_tile.cuh"
#include "cuda/kernels.h"
#include "cuda/planner_kernels.h"
#include "cuda/replicate_base.cuh"
#include "cuda/sync.cuh"
#include "iser/gpu_planner.h"

namespace iser::cuda {
namespace {

struct CountExchangeConfig {
  static constexpr int kThreads = 512;
};

struct CountExchangeParams {
  RankSpace space;
  const int32_t* rows;  // [num_local][E], or the count rows written when count.topk_ids is set
  int32_t* matrix;      // [num_local][P][E]
  uint64_t epoch;
  int32_t local_begin;  // blockIdx.x + local_begin = local rank
  ExchangeCount count;  // topk_ids == nullptr: `rows` is the input
};

// The count kernel's work for one row on one CTA (count.cuh does it on a cluster per row): tile
// by tile, a shared-memory histogram stored to the row's tile counts and added to `row_hist`;
// each tile's ids are loaded before its histogram is zeroed (count_tile.cuh). Ids outside [-1, E)
// are ignored and set kGpuBadExpertId. Ends with a barrier.
__device__ void count_row_one_cta(const ExchangeCount& c, int local_idx, int num_experts,
                                  int32_t* tile_hist, int32_t* row_hist) {
  static_assert(CountExchangeConfig::kThreads == kTileThreads);
  const int E = num_experts;
  const int tid = static_cast<int>(threadIdx.x);
  const int num_tiles = c.num_routes <= 0 ? 1 : (c.num_routes + kRouteTile - 1) / kRouteTile;
  const int32_t* ids = c.topk_ids + static_cast<int64_t>(local_idx) * c.num_routes;
  const int lead = ids_to_16_bytes(ids);
  int32_t* tile_rows = c.tile_counts + static_cast<int64_t>(local_idx) * num_tiles * E;
  bool bad = false;
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int begin = tile * kRouteTile;
    const TileIds t = load_tile_ids(ids, lead, begin, min(begin + kRouteTile, c.num_routes), tid);
    for (int e = tid; e < E; e += kTileThreads) {
      tile_hist[e] = 0;
      if (tile == 0) row_hist[e] = 0;
    }
    __syncthreads();
    count_tile_ids(t, E, tile_hist, bad);
    __syncthreads();
    for (int e = tid; e < E; e += kTileThreads) {
      tile_rows[static_cast<int64_t>(tile) * E + e] = tile_hist[e];
      row_hist[e] += tile_hist[e];
    }
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(c.error_word, kGpuBadExpertId);
  if (c.rows != nullptr) {
    for (int e = tid; e < E; e += kTileThreads) {
      c.rows[static_cast<int64_t>(local_idx) * E + e] = row_hist[e];
    }
  }
}

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

__device__ __forceinline__ bool is_aligned16(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0;
}

// Stores `row` (row_words words of type Word) into row `rank` of parity `parity` of every rank
// set in `deliver`.
template <typename Word>
__device__ __forceinline__ void push_row(const RankSpace& space, const int32_t* row, int rank,
                                         int parity, const uint32_t* deliver, int row_words) {
  const auto* words = reinterpret_cast<const Word*>(row);
  const int64_t total = static_cast<int64_t>(space.layout.num_ranks) * row_words;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int dst_rank = static_cast<int>(i / row_words);
    if (!test_bit(deliver, dst_rank)) continue;
    auto* dst =
        reinterpret_cast<Word*>(space.peer_bases[dst_rank] + space.layout.count_row(parity, rank));
    const int64_t word = i - static_cast<int64_t>(dst_rank) * row_words;
    dst[word] = words[word];
  }
}

template <typename Word>
__device__ __forceinline__ void copy_rows(const char* src, int32_t* dst, int64_t num_words) {
  const auto* from = reinterpret_cast<const Word*>(src);
  auto* to = reinterpret_cast<Word*>(dst);
  for (int64_t i = threadIdx.x; i < num_words; i += blockDim.x) to[i] = from[i];
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
  // Counting: [tile histogram][row], 16-byte aligned for the wide pushes.
  extern __shared__ __align__(16) int32_t count_smem[];
  const int32_t* row = p.count.topk_ids != nullptr
                           ? count_smem + num_experts
                           : p.rows + static_cast<int64_t>(local_idx) * num_experts;
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
  // 1b. Count my row (count_and_exchange), after publishing: the peers' pushes need no row of mine.
  if (p.count.topk_ids != nullptr) {
    count_row_one_cta(p.count, local_idx, num_experts, count_smem, count_smem + num_experts);
  }
  // 2. Push my row to each of them (myself included): 16-byte stores when the rows allow them
  //    (E % 4 == 0 keeps every row of the regions and of `rows` / `matrix` 16-byte aligned).
  const bool wide = num_experts % 4 == 0 && is_aligned16(row) && is_aligned16(p.matrix);
  if (wide) {
    push_row<int4>(space, row, rank, parity, deliver, num_experts / 4);
  } else {
    push_row<int32_t>(space, row, rank, parity, deliver, num_experts);
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
  const auto* src = space.peer_bases[rank] + layout.count_row(parity, 0);
  int32_t* out = p.matrix + static_cast<int64_t>(local_idx) * num_ranks * num_experts;
  if (wide) {
    copy_rows<int4>(src, out, static_cast<int64_t>(num_ranks) * num_experts / 4);
  } else {
    copy_rows<int32_t>(src, out, static_cast<int64_t>(num_ranks) * num_experts);
  }
  // Every thread read the counter (resolve_generation) before the barriers above.
  if (threadIdx.x == 0) scratch->epoch = epoch;
}

}  // namespace

void launch_count_exchange(const RankSpace& space, const int32_t* rows, int32_t* matrix,
                           uint64_t epoch, int local_begin, int local_end, cudaStream_t stream,
                           const ExchangeCount& count) {
  CountExchangeParams params{space, rows, matrix, epoch, local_begin, count};
  const size_t smem = count.topk_ids != nullptr
                          ? 2 * sizeof(int32_t) * static_cast<size_t>(space.layout.num_experts)
                          : 0;
  count_exchange_kernel<<<local_end - local_begin, CountExchangeConfig::kThreads, smem, stream>>>(
      params);
  ISER_CHECK_LAUNCH("count_exchange_kernel");
}

void preload_exchange_kernels() {
  preload_functions({reinterpret_cast<const void*>(&count_exchange_kernel)});
}

}  // namespace iser::cuda
