// Count kernel (docs/design.md §9): one rank's topk_ids [tau, k] -> its row c[s][.] of the count
// matrix.
//
// One CTA per tile of kRouteTile routes builds the tile's histogram in shared memory and stores
// it to tile_counts (the rewrite kernel turns those into route ordinals); the last CTA of a row
// to finish (a ticket per row) sums the row's tiles into counts. The sum is done by one CTA in a
// fixed order, so counts are deterministic and need no zeroing launch.
#pragma once

#include <cstdint>

#include "cuda/planner_kernels.h"
#include "iser/gpu_planner.h"

namespace iser::cuda {

struct CountConfig {
  static constexpr int kThreads = 256;
};

__global__ void __launch_bounds__(CountConfig::kThreads) count_kernel(const CountParams p) {
  extern __shared__ int32_t hist[];  // [num_experts]
  __shared__ bool is_last;
  const int row = blockIdx.y;
  const int tile = blockIdx.x;
  const int E = p.num_experts;
  for (int e = threadIdx.x; e < E; e += CountConfig::kThreads) hist[e] = 0;
  __syncthreads();

  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  const int begin = tile * kRouteTile;
  const int end = min(begin + kRouteTile, p.num_routes);
  bool bad = false;
  for (int i = begin + threadIdx.x; i < end; i += CountConfig::kThreads) {
    const int32_t id = ids[i];
    if (id >= 0 && id < E) {
      atomicAdd(&hist[id], 1);
    } else if (id != -1) {
      bad = true;
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(p.error_word, kGpuBadExpertId);

  int32_t* tile_row =
      p.tile_counts + (static_cast<int64_t>(row) * p.num_tiles + tile) * static_cast<int64_t>(E);
  for (int e = threadIdx.x; e < E; e += CountConfig::kThreads) tile_row[e] = hist[e];

  // NOTE: classic last-block reduction. Each CTA's stores are made device-visible
  // (__threadfence) before its ticket; the CTA drawing the last ticket then reads every tile with
  // L1-bypassing loads, so it sees all of them.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t ticket = atomicAdd(&p.tickets[row], 1u);
    is_last = ticket == static_cast<uint32_t>(p.num_tiles - 1);
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int32_t* tiles = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E;
  int32_t* out = p.counts + static_cast<int64_t>(row) * E;
  for (int e = threadIdx.x; e < E; e += CountConfig::kThreads) {
    int32_t sum = 0;
#pragma unroll 8
    for (int t = 0; t < p.num_tiles; ++t) sum += __ldcg(tiles + static_cast<int64_t>(t) * E + e);
    out[e] = sum;
  }
  if (threadIdx.x == 0) p.tickets[row] = 0;  // ready for the next launch (stream order)
}

}  // namespace iser::cuda
