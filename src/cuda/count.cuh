// Count kernel (docs/design.md §9): topk_ids [rows][routes] -> count rows c[s][.] and the
// per-tile histograms (tile_counts) that the rewrite kernels turn into route ordinals.
//
// One thread-block cluster per row: CTA r of a cluster of C (C = min(tiles, 8)) histograms the
// row's tiles r, r + C, ... in shared memory (one histogram per tile) and stores them to
// tile_counts; each CTA adds its row sums into the owner of each expert slice through distributed
// shared memory, and after one cluster barrier the owners store the row. No global atomics, no
// zeroing launch, no last-block hand-off: one launch. Every thread loads its ids first (one
// 16-byte load per tile from the row's first 16-byte boundary, plus at most one id of the tile's
// unaligned head or tail), so the load latency covers the shared-memory zeroing and the
// barriers' set-up.
// Rows of one tile (decode sizes) take count_tile_kernel instead: one plain CTA per row, four
// coalesced scalar loads per thread, one histogram that is both the tile row and the row. Under
// an L2 flush its span is half count_kernel's at one tile (0.99 against 1.95 µs at 1,536 ids on
// an H200: docs/benchmarks.md), the generic kernel's larger code being fetched from memory.
// Rows of 2 to kMaxClusterCtas · kMaxTilesPerCta tiles take count_cluster_kernel<kTiles>: the
// same cluster scheme with the tiles per CTA known at compile time and coalesced scalar loads
// (2.72 against 3.30 µs at 49,152 ids in a bench-only copy); longer rows keep count_kernel.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/count_tile.cuh"
#include "cuda/planner_kernels.h"
#include "cuda/sync.cuh"
#include "iser/gpu_planner.h"

namespace iser::cuda {

struct CountConfig {
  static constexpr int kThreads = 512;
  static constexpr int kMaxClusterCtas = 8;  // portable cluster size
  static constexpr int kTilesInFlight = 4;   // tiles whose ids a thread loads before counting
  static constexpr int kMaxTilesPerCta = 4;  // count_cluster_kernel's instances: 1 .. this
  static constexpr int kIdsPerThread = kRouteTile / kThreads;  // per tile, scalar loads
  static_assert(kThreads == kTileThreads);                     // one TileIds per thread and tile
};

// CTAs per row (the cluster size) and tiles per CTA for a row of num_tiles tiles.
__host__ __device__ constexpr int count_ctas(int num_tiles) {
  return num_tiles < CountConfig::kMaxClusterCtas ? num_tiles : CountConfig::kMaxClusterCtas;
}
__host__ __device__ constexpr int count_tiles_per_cta(int num_tiles) {
  return (num_tiles + count_ctas(num_tiles) - 1) / count_ctas(num_tiles);
}
// Dynamic shared memory: the row slices the CTA owns in the cluster, then a histogram per tile.
__host__ __device__ constexpr int count_smem_bytes(int num_tiles, int num_experts) {
  return static_cast<int>(sizeof(int32_t)) * (count_tiles_per_cta(num_tiles) + 1) * num_experts;
}

// The optional benchmark timer (CountParams::timer): the CTAs' first start and last end.
__device__ __forceinline__ void count_timer_start(const CountParams& p) {
  if (p.timer != nullptr && threadIdx.x == 0)
    atomicMin(p.timer, static_cast<unsigned long long>(globaltimer_ns()));
}
__device__ __forceinline__ void count_timer_end(const CountParams& p) {
  if (p.timer == nullptr) return;
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(p.timer + 1, static_cast<unsigned long long>(globaltimer_ns()));
}

__global__ void __launch_bounds__(CountConfig::kThreads) count_kernel(const CountParams p) {
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) int32_t smem[];
  count_timer_start(p);
  const int tid = static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int cta = static_cast<int>(blockIdx.x);  // rank in the row's cluster (cluster = grid.x)
  const int num_ctas = static_cast<int>(gridDim.x);
  const int E = p.num_experts;
  const int my_tiles = (p.num_tiles - cta + num_ctas - 1) / num_ctas;
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  const int lead = ids_to_16_bytes(ids);
  const auto load_batch = [&](int first, TileIds(&batch)[CountConfig::kTilesInFlight]) {
#pragma unroll
    for (int j = 0; j < CountConfig::kTilesInFlight; ++j) {
      const int begin = (cta + (first + j) * num_ctas) * kRouteTile;
      const int end = first + j < my_tiles ? min(begin + kRouteTile, p.num_routes) : begin;
      batch[j] = load_tile_ids(ids, lead, begin, end, tid);
    }
  };
  TileIds batch[CountConfig::kTilesInFlight];
  load_batch(0, batch);

  // Zeroing while the ids are on their way: the owned slices (cluster rows) and the histograms.
  int32_t* owned = smem;     // [E]: this CTA's slice of the row, added to by the whole cluster
  int32_t* hist = smem + E;  // [my_tiles][E]
  for (int i = num_ctas > 1 ? tid : E + tid; i < (my_tiles + 1) * E; i += CountConfig::kThreads)
    smem[i] = 0;
  // Arrive (release) once `owned` is zero; the wait comes before the first add into a peer's.
  if (num_ctas > 1) __cluster_barrier_arrive();
  __syncthreads();

  bool bad = false;
  for (int first = 0;; first += CountConfig::kTilesInFlight) {
#pragma unroll
    for (int j = 0; j < CountConfig::kTilesInFlight; ++j) {
      // Past my_tiles the ids are all -1: the histogram pointer is not used.
      count_tile_ids(batch[j], E, hist + (first + j) * E, bad);
    }
    if (first + CountConfig::kTilesInFlight >= my_tiles) break;
    load_batch(first + CountConfig::kTilesInFlight, batch);
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGpuBadExpertId);

  // tile_counts, and the row: stored directly by a lone CTA, else added into the slice owners'.
  int32_t* tile_rows = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E;
  int32_t* out = p.counts + static_cast<int64_t>(row) * E;
  const int slice = (E + num_ctas - 1) / num_ctas;
  if (num_ctas > 1) __cluster_barrier_wait();
  cg::cluster_group cluster = cg::this_cluster();
  for (int e = tid; e < E; e += CountConfig::kThreads) {
    int32_t sum = 0;
    for (int j = 0; j < my_tiles; ++j) {
      const int32_t n = hist[j * E + e];
      tile_rows[static_cast<int64_t>(cta + j * num_ctas) * E + e] = n;
      sum += n;
    }
    if (num_ctas == 1) {
      out[e] = sum;
    } else if (sum != 0) {
      atomicAdd(cluster.map_shared_rank(owned + e, static_cast<unsigned>(e / slice)), sum);
    }
  }
  if (num_ctas > 1) {
    // NOTE: integer adds commute, so the row is the same whatever order the CTAs' adds land in.
    // cluster.sync() is arrive.release + wait.acquire: every add into `owned` is visible after
    // it, and no CTA touches a peer's shared memory after it (a CTA may then exit).
    cluster.sync();
    const int end = min(E, (cta + 1) * slice);
    for (int e = cta * slice + tid; e < end; e += CountConfig::kThreads) out[e] = owned[e];
  }
  count_timer_end(p);
}

// Rows of 2 .. kMaxClusterCtas · kMaxTilesPerCta tiles: one cluster of count_ctas(num_tiles) CTAs
// per row (grid.x), CTA r counting tiles r, r + C, …, kTiles of them (count_tiles_per_cta); its
// ids are all loaded (scalar, coalesced) before the shared memory is zeroed. Same outputs and
// error bits as count_kernel.
template <int kTiles>
__global__ void __launch_bounds__(CountConfig::kThreads) count_cluster_kernel(const CountParams p) {
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) int32_t smem[];
  count_timer_start(p);
  const int tid = static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int cta = static_cast<int>(blockIdx.x);  // rank in the row's cluster (cluster = grid.x)
  const int num_ctas = static_cast<int>(gridDim.x);
  const int E = p.num_experts;
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  int32_t id[kTiles][CountConfig::kIdsPerThread];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int tile = cta + j * num_ctas;
#pragma unroll
    for (int k = 0; k < CountConfig::kIdsPerThread; ++k) {
      const int i = tile * kRouteTile + k * CountConfig::kThreads + tid;
      id[j][k] = tile < p.num_tiles && i < p.num_routes ? __ldg(ids + i) : -1;
    }
  }
  int32_t* owned = smem;     // [E]: this CTA's slice of the row, added to by the whole cluster
  int32_t* hist = smem + E;  // [kTiles][E]
  for (int i = tid; i < (kTiles + 1) * E; i += CountConfig::kThreads) smem[i] = 0;
  // Arrive (release) once `owned` is zero; the wait comes before the first add into a peer's.
  __cluster_barrier_arrive();
  __syncthreads();
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int k = 0; k < CountConfig::kIdsPerThread; ++k) count_id(id[j][k], E, hist + j * E, bad);
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGpuBadExpertId);
  int32_t* tile_rows = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E;
  int32_t* out = p.counts + static_cast<int64_t>(row) * E;
  const int slice = (E + num_ctas - 1) / num_ctas;
  __cluster_barrier_wait();
  cg::cluster_group cluster = cg::this_cluster();
  for (int e = tid; e < E; e += CountConfig::kThreads) {
    int32_t sum = 0;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int tile = cta + j * num_ctas;
      if (tile < p.num_tiles) {
        const int32_t n = hist[j * E + e];
        tile_rows[static_cast<int64_t>(tile) * E + e] = n;
        sum += n;
      }
    }
    if (sum != 0) {
      atomicAdd(cluster.map_shared_rank(owned + e, static_cast<unsigned>(e / slice)), sum);
    }
  }
  // NOTE: as in count_kernel: integer adds commute, and cluster.sync() (arrive.release +
  // wait.acquire) makes every add into `owned` visible and ends all access to peers' memory.
  cluster.sync();
  const int end = min(E, (cta + 1) * slice);
  for (int e = cta * slice + tid; e < end; e += CountConfig::kThreads) out[e] = owned[e];
  count_timer_end(p);
}

// Rows of at most one tile (num_routes <= kRouteTile): CTA y counts row y. Same outputs and error
// bits as count_kernel; tile_counts holds the row again (its one tile).
__global__ void __launch_bounds__(CountConfig::kThreads) count_tile_kernel(const CountParams p) {
  extern __shared__ __align__(16) int32_t hist[];  // [E]
  count_timer_start(p);
  const int tid = static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int E = p.num_experts;
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  // The loads first: their latency covers the zeroing and the barrier.
  int32_t id[CountConfig::kIdsPerThread];
#pragma unroll
  for (int k = 0; k < CountConfig::kIdsPerThread; ++k) {
    const int i = tid + k * CountConfig::kThreads;
    id[k] = i < p.num_routes ? __ldg(ids + i) : -1;
  }
  for (int e = tid; e < E; e += CountConfig::kThreads) hist[e] = 0;
  __syncthreads();
  bool bad = false;
#pragma unroll
  for (int k = 0; k < CountConfig::kIdsPerThread; ++k) count_id(id[k], E, hist, bad);
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGpuBadExpertId);
  int32_t* out = p.counts + static_cast<int64_t>(row) * E;
  int32_t* tile_row = p.tile_counts + static_cast<int64_t>(row) * E;  // num_tiles = 1
  for (int e = tid; e < E; e += CountConfig::kThreads) {
    const int32_t n = hist[e];
    out[e] = n;
    tile_row[e] = n;
  }
  count_timer_end(p);
}

}  // namespace iser::cuda
