// Small kernels of the reference MoE layer (src/moe): each a plain Params struct, a Config of
// launch constants, one __global__ entry (in its own .cu file) and one launch helper declared
// here. GEMMs are not here: they run in cuBLAS (src/moe/grouped_mlp.cu).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "iser/copy_list.h"

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

namespace iser::cuda {

// ---- dispatch (single process): gather token rows into slot order --------------------------
// dst[row] = src[row_map[row]] for row < num_rows; rows of `hidden` bf16.
struct GatherRowsParams {
  const uint16_t* src = nullptr;
  uint16_t* dst = nullptr;
  const int32_t* row_map = nullptr;
  int64_t num_rows = 0;
  int hidden = 0;  // multiple of kVec
};
struct GatherRowsConfig {
  static constexpr int kThreads = 128;
  static constexpr int kVec = 8;
};
void launch_gather_rows(const GatherRowsParams& params, cudaStream_t stream);

// ---- combine: out[t] = bf16(shared[t] + sum_j w[t, j] * y[route_row[t, j]]) ----------------
// NOTE: the sum starts from the shared expert's output (when given), then j runs 0..k-1 in
// order, in fp32, whatever rank or slot computed each row: a token's output depends only on the
// rows' bytes, so ON and OFF combine identically.
struct CombineParams {
  const uint16_t* y = nullptr;          // expert outputs, rows of `hidden`
  const int32_t* route_row = nullptr;   // [num_tokens * top_k], -1 = no route
  const float* route_weight = nullptr;  // [num_tokens * top_k]
  const uint16_t* shared = nullptr;     // [num_tokens, hidden] or null
  uint16_t* out = nullptr;              // [num_tokens, hidden]
  int64_t num_tokens = 0;
  int top_k = 0;
  int hidden = 0;  // multiple of kVec
};
struct CombineConfig {
  static constexpr int kThreads = 128;
  static constexpr int kVec = 8;
};
void launch_combine(const CombineParams& params, cudaStream_t stream);

}  // namespace iser::cuda

namespace iser::cuda {

// ---- bitwise comparison: mismatches += #{i < num_elems : a[i] != b[i]} -----------------------
// Verifies at construction that a cublasLt tail algorithm writes the same bytes as the pinned
// one (src/moe/lt_verify.cpp). One counter per comparison, accumulated atomically.
struct CountMismatchesParams {
  const uint16_t* a = nullptr;
  const uint16_t* b = nullptr;
  int64_t num_elems = 0;
  uint32_t* mismatches = nullptr;  // device counter, added to
};
struct CountMismatchesConfig {
  static constexpr int kThreads = 256;
  static constexpr int kMaxBlocks = 1024;
};
void launch_count_mismatches(const CountMismatchesParams& params, cudaStream_t stream);

}  // namespace iser::cuda

namespace iser::cuda {

// ---- READY fallback: refill helper slots whose replica the READY gate did not validate -------
// For local helper slot h with a planned expert (expert[h] >= 0): when the gate's view
// slot_expert[slot_base + h] differs (no valid replica: the writer timed out or failed), copies
// the expert's home bundle from its owner's symmetric memory (src[h], a peer mapping) into the
// slot (dst[h]) and counts the slot; otherwise does nothing. The helper GEMMs then compute those
// routes with the home expert's bytes, so the layer's output is the same as with the replica.
struct FallbackCopyConfig {
  static constexpr int kThreads = 256;
  static constexpr int kBlocksPerSlot = 64;
  static constexpr int kMaxSlots = 32;
};
struct FallbackCopyParams {
  const int32_t* slot_expert = nullptr;  // the READY gate's output, [P * S] for this rank
  int32_t slot_base = 0;                 // this rank's first entry: rank * S
  int num_slots = 0;                     // S (<= kMaxSlots)
  int64_t bytes = 0;                     // bundle bytes, a multiple of 16
  uint32_t* fallback_slots = nullptr;    // device counter, += 1 per slot refilled
  int32_t expert[FallbackCopyConfig::kMaxSlots] = {};
  const void* src[FallbackCopyConfig::kMaxSlots] = {};
  void* dst[FallbackCopyConfig::kMaxSlots] = {};
};
void launch_fallback_copy(const FallbackCopyParams& params, cudaStream_t stream);

}  // namespace iser::cuda

namespace iser::cuda {

// ---- GPU plan -> replication copy list (the EP layer's GPU-planned mode) ---------------------
// Reads one GpuPlanner plan (include/iser/gpu_planner.h) and writes exactly max_ops CopyOp:
// entries [0, B) are make_copy_list(plan) (B = the plan's broadcasts, plan order), the rest are
// null ops {expert -1, owner -1, group 0 + 0, helper 0, direct}, which no rank writes under any
// transport (no slices, no fence targets), so the replicate kernel can take max_ops from the host
// without waiting for the plan. *num_ops gets B; 0 when the plan's status is not 0 (it carries
// no broadcasts); -1 when a broadcast is outside the topology (owner, expert, group or helper
// out of range, or B > max_ops): then every entry is null and nothing is copied.
struct PlanCopyListConfig {
  static constexpr int kThreads = 256;  // one CTA; ops beyond kThreads are strided
};
struct PlanCopyListParams {
  const int32_t* plan = nullptr;  // GpuPlanLayout words
  int32_t broadcasts_offset = 0;  // GpuPlanLayout::broadcasts()
  int32_t max_ops = 0;            // GpuPlanLayout::max_broadcasts (entries written)
  int32_t num_ranks = 0;
  int32_t experts_per_rank = 0;
  int32_t num_slots = 0;
  CopyOp* ops = nullptr;       // [max_ops]
  int32_t* num_ops = nullptr;  // one word
};
void launch_plan_copy_list(const PlanCopyListParams& params, cudaStream_t stream);

}  // namespace iser::cuda
