// Shared pieces of the replication kernel (replicate.cuh) and its host lane (host_lane.cuh):
// launch constants, parameters, and the 16-byte register loads / stores.
#pragma once

#include "cuda/kernels.h"

namespace iser::cuda {

struct ReplicateConfig {
  static constexpr int kMaxThreads = 512;  // launch bound of both paths
  static constexpr int kMaxWarps = kMaxThreads / 32;
  static constexpr int kVecPerLane = static_cast<int>(kSliceBytes / 16 / 32);  // 16 x 16 B
  static constexpr int kMaxRanks = 1024;
  static constexpr int kRankWords = kMaxRanks / 32;
  static constexpr int kMaxStages = kMaxCopyStagesPerCta;
  static constexpr int kDefaultRegisterWarps = 16;
  static constexpr int kDefaultBulkWarps = 4;
  static constexpr int kDefaultBulkStages = 5;
  static constexpr int kMaxBulkLag = 7;  // bulk_wait_read's largest immediate
  // Bulk host lane: bulk groups (slices) a chunk's flag trails its last store (measured best of
  // 4 and 12 on 2 x H200, docs/benchmarks.md); < host_lane.cuh's kHostFlagRing - 1.
  static constexpr int kHostFlagLag = 12;
};

struct ReplicateParams {
  RankSpace space;
  ReplicateArgs args;
  int32_t local_begin = 0;
  int32_t stages = 0;  // bulk path: stages per warp
};

__device__ __forceinline__ bool test_bit(const uint32_t* bits, int idx) {
  return (bits[idx >> 5] >> (idx & 31)) & 1u;
}

__device__ __forceinline__ int4 load_vec(const char* ptr) {
  int4 v;
  asm volatile("ld.global.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

__device__ __forceinline__ void store_vec(char* ptr, const int4& v) {
  asm volatile("st.global.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

}  // namespace iser::cuda
