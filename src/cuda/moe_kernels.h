// Small kernels of the reference MoE layer (src/moe): each a plain Params struct, a Config of
// launch constants, one __global__ entry (in its own .cu file) and one launch helper declared
// here. GEMMs are not here: they run in cuBLAS (src/moe/grouped_mlp.cu).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace iser::cuda {

// ---- fill: deterministic pseudo-random bf16 ------------------------------------------------
struct FillUniformParams {
  uint16_t* out = nullptr;  // bf16 bit patterns
  int64_t num_elems = 0;
  uint64_t seed = 0;
  float scale = 1.0f;  // values uniform in [-scale, scale)
};
struct FillUniformConfig {
  static constexpr int kThreads = 256;
  static constexpr int kMaxBlocks = 4096;
};
void launch_fill_uniform(const FillUniformParams& params, cudaStream_t stream);

// ---- SiLU(gate) * up -------------------------------------------------------------------------
// act[r, i] = bf16(silu(float(h13[r, i])) * float(h13[r, I + i])) for r < num_rows, i < I.
struct SiluMulParams {
  const uint16_t* h13 = nullptr;  // [num_rows, 2I] bf16
  uint16_t* act = nullptr;        // [num_rows, I] bf16
  int64_t num_rows = 0;
  int intermediate = 0;  // I, a multiple of kVec
};
struct SiluMulConfig {
  static constexpr int kThreads = 256;
  static constexpr int kVec = 8;  // bf16 per 16-byte access
  static constexpr int kMaxBlocks = 8192;
};
void launch_silu_mul(const SiluMulParams& params, cudaStream_t stream);

// ---- grouped-GEMM pointer tables -----------------------------------------------------------
// For group g (a non-empty slot): A1 = w13[slot], B1 = x + row_begin*He, C1 = h13 +
// row_begin*2I; A2 = w2[slot], B2 = act + row_begin*I, C2 = y + row_begin*He. Passing the
// groups by value keeps the tables stream-ordered with no host staging buffer.
struct GroupPointersConfig {
  static constexpr int kMaxGroups = 640;  // >= H + S for every supported topology
  static constexpr int kThreads = 128;
};
struct GroupPointersParams {
  const void* const* w13_table = nullptr;  // [num_slots] device pointers
  const void* const* w2_table = nullptr;
  const uint16_t* x = nullptr;
  uint16_t* h13 = nullptr;
  uint16_t* act = nullptr;
  uint16_t* y = nullptr;
  int hidden = 0;
  int intermediate = 0;
  const void** out = nullptr;  // [6][kMaxGroups]: A1, B1, C1, A2, B2, C2
  int num_groups = 0;
  int32_t slot[GroupPointersConfig::kMaxGroups] = {};
  int32_t row_begin[GroupPointersConfig::kMaxGroups] = {};
};
void launch_group_pointers(const GroupPointersParams& params, cudaStream_t stream);

}  // namespace iser::cuda
