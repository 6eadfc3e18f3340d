// A thread's share of one route tile, for the count kernel (count.cuh) and the count inside the
// exchange kernel (exchange.cu): 512 threads load a tile of kRouteTile ids with one 16-byte load
// each, from the row's first 16-byte boundary on, plus at most one id of the tile's unaligned
// head or tail, and count them into a shared-memory histogram.
#pragma once

#include <cstdint>

#include "cuda/planner_kernels.h"

namespace iser::cuda {

inline constexpr int kTileIdsPerThread = 4;  // ids per 16-byte load
inline constexpr int kTileThreads = kRouteTile / kTileIdsPerThread;

// Ids from `ids` to its first 16-byte boundary (0-3).
// NOTE: an int32_t pointer is 4-byte aligned; a tile starts a multiple of kRouteTile ids into the
// row, so every tile's body is aligned the same way as the row's.
__device__ __forceinline__ int ids_to_16_bytes(const int32_t* ids) {
  return static_cast<int>((0u - static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ids))) & 15u) /
         static_cast<int>(sizeof(int32_t));
}

// A thread's ids of one tile [begin, end) of a row whose first 16-byte boundary is `lead` ids in:
// chunk `tid` of the tile's 16-byte-aligned body, and one id of the head (the tile's first
// `lead` ids, threads 0..lead-1) or of the tail (< 4 ids after the body, threads 4..6). Ids past
// the tile (end <= begin: no tile) are -1 (none). For kTileThreads threads, tid < kTileThreads.
struct TileIds {
  int4 chunk;
  int32_t single;
};

__device__ __forceinline__ TileIds load_tile_ids(const int32_t* ids, int lead, int begin, int end,
                                                 int tid) {
  const int head_end = min(begin + lead, end);
  const int body_end = head_end + max(end - head_end, 0) / kTileIdsPerThread * kTileIdsPerThread;
  const int chunk = head_end + tid * kTileIdsPerThread;
  TileIds t;
  t.chunk = chunk + kTileIdsPerThread <= body_end
                ? __ldg(reinterpret_cast<const int4*>(ids + chunk))
                : make_int4(-1, -1, -1, -1);
  int single = -1;
  if (tid < head_end - begin) {
    single = begin + tid;
  } else if (tid >= kTileIdsPerThread && tid - kTileIdsPerThread < end - body_end) {
    single = body_end + tid - kTileIdsPerThread;
  }
  t.single = single >= 0 ? __ldg(ids + single) : -1;
  return t;
}

__device__ __forceinline__ void count_id(int32_t id, int num_experts, int32_t* hist, bool& bad) {
  if (static_cast<uint32_t>(id) < static_cast<uint32_t>(num_experts)) {
    atomicAdd(hist + id, 1);
  } else if (id != -1) {
    bad = true;
  }
}

// Counts a thread's ids of a tile into `hist` (shared memory); an id outside [-1, E) sets `bad`.
__device__ __forceinline__ void count_tile_ids(const TileIds& t, int num_experts, int32_t* hist,
                                               bool& bad) {
  count_id(t.chunk.x, num_experts, hist, bad);
  count_id(t.chunk.y, num_experts, hist, bad);
  count_id(t.chunk.z, num_experts, hist, bad);
  count_id(t.chunk.w, num_experts, hist, bad);
  count_id(t.single, num_experts, hist, bad);
}

}  // namespace iser::cuda
