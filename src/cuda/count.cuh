// Count kernel (docs/design.md §9): topk_ids [rows][routes] -> count rows c[s][.] and the
// per-tile histograms (tile_counts) that the rewrite kernels turn into route ordinals.
//
// One thread-block cluster per row: CTA r of a cluster of C (C = min(tiles, 8)) histograms the
// row's tiles r, r + C, ... in shared memory (one histogram per tile), stores them to tile_counts
// and sums them into its partial row; after one cluster barrier each CTA adds up a slice of the
// experts over the C partial rows through distributed shared memory. No global atomics, no
// zeroing launch and no last-block hand-off: one launch, and the sums run in a fixed order, so the
// counts are deterministic. A row of one tile (decode sizes) is one plain CTA.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/planner_kernels.h"
#include "cuda/sync.cuh"
#include "iser/gpu_planner.h"

namespace iser::cuda {

struct CountConfig {
  static constexpr int kThreads = 512;
  static constexpr int kRoutesPerThread = kRouteTile / kThreads;  // per tile
  static constexpr int kMaxClusterCtas = 8;                       // portable cluster size
  static constexpr int kTilesInFlight = 4;  // tiles whose ids a thread loads before counting
  static_assert(kRouteTile % kThreads == 0);
};

// CTAs per row (the cluster size) and tiles per CTA for a row of num_tiles tiles.
__host__ __device__ constexpr int count_ctas(int num_tiles) {
  return num_tiles < CountConfig::kMaxClusterCtas ? num_tiles : CountConfig::kMaxClusterCtas;
}
__host__ __device__ constexpr int count_tiles_per_cta(int num_tiles) {
  return (num_tiles + count_ctas(num_tiles) - 1) / count_ctas(num_tiles);
}
// Dynamic shared memory: a histogram per tile of the CTA, then its partial row.
__host__ __device__ constexpr int count_smem_bytes(int num_tiles, int num_experts) {
  return static_cast<int>(sizeof(int32_t)) * (count_tiles_per_cta(num_tiles) + 1) * num_experts;
}

__global__ void __launch_bounds__(CountConfig::kThreads) count_kernel(const CountParams p) {
  namespace cg = cooperative_groups;
  extern __shared__ int32_t smem[];
  if (p.timer != nullptr && threadIdx.x == 0)
    atomicMin(p.timer, static_cast<unsigned long long>(globaltimer_ns()));
  const int tid = static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int cta = static_cast<int>(blockIdx.x);  // rank in the row's cluster (cluster = grid.x)
  const int num_ctas = static_cast<int>(gridDim.x);
  const int E = p.num_experts;
  const int my_tiles = (p.num_tiles - cta + num_ctas - 1) / num_ctas;
  int32_t* hist = smem;                                            // [my_tiles][E]
  int32_t* partial = smem + count_tiles_per_cta(p.num_tiles) * E;  // [E]
  for (int i = tid; i < my_tiles * E; i += CountConfig::kThreads) hist[i] = 0;
  __syncthreads();

  // Histograms: the ids of kTilesInFlight tiles are loaded before any is counted (independent
  // loads in flight), then counted with shared-memory atomics.
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  bool bad = false;
  for (int first = 0; first < my_tiles; first += CountConfig::kTilesInFlight) {
    int32_t id[CountConfig::kTilesInFlight][CountConfig::kRoutesPerThread];
#pragma unroll
    for (int j = 0; j < CountConfig::kTilesInFlight; ++j) {
      const int base = (cta + (first + j) * num_ctas) * kRouteTile + tid;
#pragma unroll
      for (int i = 0; i < CountConfig::kRoutesPerThread; ++i) {
        const int idx = base + i * CountConfig::kThreads;
        id[j][i] = first + j < my_tiles && idx < p.num_routes ? __ldg(ids + idx) : -1;
      }
    }
#pragma unroll
    for (int j = 0; j < CountConfig::kTilesInFlight; ++j) {
#pragma unroll
      for (int i = 0; i < CountConfig::kRoutesPerThread; ++i) {
        const int32_t v = id[j][i];
        if (v >= 0 && v < E) {
          atomicAdd(&hist[(first + j) * E + v], 1);
        } else if (v != -1) {
          bad = true;
        }
      }
    }
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, kGpuBadExpertId);

  // tile_counts, and the CTA's partial row (the whole row when the cluster is one CTA).
  int32_t* tile_rows = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E;
  int32_t* out = p.counts + static_cast<int64_t>(row) * E;
  for (int e = tid; e < E; e += CountConfig::kThreads) {
    int32_t sum = 0;
    for (int j = 0; j < my_tiles; ++j) {
      const int32_t n = hist[j * E + e];
      tile_rows[static_cast<int64_t>(cta + j * num_ctas) * E + e] = n;
      sum += n;
    }
    if (num_ctas == 1) {
      out[e] = sum;
    } else {
      partial[e] = sum;
    }
  }
  if (num_ctas > 1) {
    // NOTE: cluster.sync() is barrier.cluster.arrive.release + wait.acquire: every CTA's partial
    // row is visible to the whole cluster after it. The second one keeps each CTA's shared memory
    // alive until the other CTAs finished reading it.
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int slice = (E + num_ctas - 1) / num_ctas;
    const int end = min(E, (cta + 1) * slice);
    for (int e = cta * slice + tid; e < end; e += CountConfig::kThreads) {
      int32_t sum = 0;
      for (int c = 0; c < num_ctas; ++c) sum += cluster.map_shared_rank(partial, c)[e];
      out[e] = sum;
    }
    cluster.sync();
  }
  if (p.timer != nullptr) {
    __syncthreads();
    if (tid == 0) atomicMax(p.timer + 1, static_cast<unsigned long long>(globaltimer_ns()));
  }
}

}  // namespace iser::cuda
