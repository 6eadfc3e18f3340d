// Host-visible interface of the planner kernel families (count, plan, rewrite): one plain Params
// struct and one launch helper per kernel. No CUDA types: the .cu launch units own the launches
// and, as every launch helper of the CUDA layer (launch_check.h), report a failed launch or
// attribute call as an iser::Error.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace iser::cuda {

// Routes per tile of the count and rewrite kernels: count() records per-tile histograms that
// rewrite() turns into route ordinals, so both kernels must tile identically.
inline constexpr int kRouteTile = 2048;

// CTAs per rewrite tile (RewriteParams / PlanRewriteParams::num_parts): the largest power of two
// up to max_parts with num_tiles * parts <= capacity (free CTAs), at least 1. A slot pass is bound
// by its SM's issue rate, so a row's few tiles run faster spread over otherwise idle SMs.
inline int tile_parts(long long num_tiles, long long capacity, int max_parts) {
  int parts = 1;
  while (parts * 2 <= max_parts && num_tiles * parts * 2 <= capacity) parts *= 2;
  return parts;
}

inline int num_route_tiles(int num_routes) {
  return num_routes <= 0 ? 1 : (num_routes + kRouteTile - 1) / kRouteTile;
}

struct CountParams {
  const int32_t* topk_ids = nullptr;  // [num_rows][num_routes]
  int32_t* counts = nullptr;          // [num_rows][num_experts]
  int32_t* tile_counts = nullptr;     // [num_rows][num_tiles][num_experts]
  uint32_t* error_word = nullptr;     // sticky GpuStatus bits
  // Optional (benchmarks): [0] atomicMin of the CTAs' start, [1] atomicMax of their end, in
  // globaltimer ns; the caller sets them to ~0 and 0 before the launch.
  unsigned long long* timer = nullptr;
  int num_rows = 0;
  int num_routes = 0;  // per row
  int num_tiles = 0;   // num_route_tiles(num_routes)
  int num_experts = 0;
};
// Dynamic shared memory the count kernel needs for these parameters (bytes).
int count_smem_bytes(const CountParams& params);
void prepare_count_kernel(int smem_bytes);  // raises the kernel's shared-memory limit once
void launch_count(const CountParams& params, CUstream_st* stream);

// iser's candidate placements: room-aware at T, HALO-Q, the slack ladder's four water levels and
// the two breadth-first ones (plan_iser.cuh; each on its own warp and candidate block where the
// shared memory allows).
inline constexpr int kIserParallelBlocks = 8;
// The sequential form's candidate blocks: the kept plan and a challenger (plan_iser_finish.cuh).
inline constexpr int kIserSequentialBlocks = 2;

struct PlanParams {
  const int32_t* counts = nullptr;      // [num_plans][P][E]
  int32_t* plans = nullptr;             // [num_plans][plan_words]
  unsigned long long* timer = nullptr;  // optional: kGpuPlanTimerSlots stage stamps of CTA 0
                                        // (+ kGpuRewriteTimerSlots: the fused kernel's first
                                        // rewrite CTA)
  int num_plans = 0;
  int plan_words = 0;
  int num_ranks = 0;    // P
  int num_experts = 0;  // E
  int num_slots = 0;    // S
  int num_levels = 0;
  int max_broadcasts = 0;
  int max_count = 0;  // largest valid c[s][e] (max routes per rank)
  int min_move = 0;
  bool owner_home = false;
  bool absorb = false;
  bool owner_in_group = false;
  bool iser = false;  // plan_iser (non-resident): needs the extra shared arrays of PlanSmem
  // iser: candidate blocks of PlanSmem, kIserParallelBlocks (every candidate of the slack ladder
  // on its own warp at once) where the shared memory allows, else kIserSequentialBlocks (one
  // after the other).
  int iser_blocks = kIserSequentialBlocks;
  // Stage 4 by pair lists and levels, else by phases (GpuPlanner::set_repair_schedule).
  bool scheduled_repair = false;
};
// Dynamic shared memory the plan kernel needs for these parameters (bytes).
int plan_smem_bytes(const PlanParams& params);
// True when the stage-4 pair lists hold the scratch of a challenger's finish (iser's sequential
// form; always, for P <= kGpuMaxRanks and S <= kGpuMaxSlots: checked on every planner).
bool plan_finish_scratch_fits(const PlanParams& params);
void prepare_plan_kernel(int smem_bytes);  // raises the kernel's shared-memory limit once
void launch_plan(const PlanParams& params, CUstream_st* stream);

struct RewriteParams {
  const int32_t* topk_ids = nullptr;     // [num_rows][num_routes]
  const int32_t* counts = nullptr;       // [num_plans][P][E]
  const int32_t* plans = nullptr;        // [num_plans][plan_words]
  const int32_t* tile_counts = nullptr;  // [num_rows][num_tiles][E] from count()
  int32_t* slot_ids = nullptr;           // [num_rows][num_routes]
  uint32_t* error_word = nullptr;
  int num_rows = 0;
  int first_rank = 0;  // row i is rank (first_rank + i) % P of plan (first_rank + i) / P
  int num_routes = 0;
  int num_tiles = 0;
  int plan_words = 0;
  int num_ranks = 0;
  int num_experts = 0;
  int num_slots = 0;
  int max_broadcasts = 0;
  // CTAs per tile (a power of two <= kRewriteMaxParts; the grid has num_tiles *
  // num_parts columns): each computes the tile's ordinals and writes the slots of every
  // num_parts-th route of each lane, so that a row's few tiles spread over the SMs.
  int num_parts = 1;
};
// Routes per lane of the rewrite kernel (RewriteConfig::kRoutesPerLane), the most parts a tile
// splits into.
inline constexpr int kRewriteMaxParts = 8;
int rewrite_smem_bytes(const RewriteParams& params);
void prepare_rewrite_kernel(int smem_bytes);
void launch_rewrite(const RewriteParams& params, CUstream_st* stream);

// Fused planner + rewrite (plan_rewrite.cuh): plan p.plan's num_plans invocations and rewrite
// the routes of num_rows ranks of them in one cooperative launch. Sync words (uint32, zero when
// allocated, never reset): [kSyncEpoch] launches completed, [kSyncStarted] CTAs of the running
// launch that read the epoch, [kSyncReady + i] the generation (epoch + 1) of the latest plan i.
enum PlanRewriteSync { kSyncEpoch = 0, kSyncStarted = 1, kSyncReady = 2 };
inline constexpr int plan_rewrite_sync_words(int max_plans) {
  return kSyncReady + max_plans;
}

struct PlanRewriteParams {
  PlanParams plan;                       // counts, plans, num_plans and the planner's options
  const int32_t* topk_ids = nullptr;     // [num_rows][num_routes]
  const int32_t* tile_counts = nullptr;  // [num_rows][num_tiles][E] from count()
  int32_t* slot_ids = nullptr;           // [num_rows][num_routes]
  uint32_t* error_word = nullptr;        // sticky GpuStatus bits (as the rewrite kernel's)
  uint32_t* sync = nullptr;              // plan_rewrite_sync_words(plan.num_plans) words
  int num_rows = 0;
  int first_rank = 0;  // row i is rank (first_rank + i) % P of plan (first_rank + i) / P
  int num_routes = 0;
  int num_tiles = 0;
  // CTAs per tile (1, 2 or 4; launch_plan_rewrite sets it): each computes the tile's ordinals
  // (while the plan is made) and writes the slots of every num_parts-th route of each lane, so
  // that one row's few tiles spread over the idle SMs instead of queueing on a few.
  int num_parts = 1;
  long long wait_ns = 0;  // a rewrite CTA gives up on its plan after this long (kGpuPlanTimeout)
  int poll_ns = 64;       // sleep between two polls of the plan's ready word
};
// Dynamic shared memory of the fused kernel (bytes): the planner's or a rewrite tile's, the larger.
int plan_rewrite_smem_bytes(const PlanRewriteParams& params);
// Raises the shared-memory limit of the kernel for iser (PlanParams::iser) or HALO-Q plans;
// returns the most CTAs a cooperative launch of it may have on this device (0: it cannot be
// launched).
int prepare_plan_rewrite_kernel(int smem_bytes, bool iser);
// One cooperative launch of min(num_plans + rewrite tiles, max_ctas) CTAs (max_ctas from the
// prepare call): a CTA per plan, the others share the tiles. Refused (iser::Error) unless
// num_plans < max_ctas (the caller launches fewer plans at a time).
void launch_plan_rewrite(const PlanRewriteParams& params, int max_ctas, CUstream_st* stream);

}  // namespace iser::cuda
