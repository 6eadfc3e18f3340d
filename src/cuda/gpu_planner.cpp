// GpuPlanner: limits checked on the host, device workspace owned here, kernels launched through
// their launch units (count.cu, plan.cu, rewrite.cu).
#include "iser/gpu_planner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/planner_kernels.h"
#include "iser/error.h"
#include "iser/planner.h"

namespace iser {

std::string describe_gpu_status(uint32_t status) {
  if (status == 0) return "ok";
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {kGpuBadExpertId, "bad-expert-id"},      {kGpuBadCounts, "bad-counts"},
      {kGpuColoringFailed, "coloring-failed"}, {kGpuPlanOverflow, "plan-overflow"},
      {kGpuPlanInvariant, "plan-invariant"},   {kGpuStaleTiles, "stale-tiles"},
      {kGpuPlanNotOk, "plan-not-ok"},          {kGpuPlanTimeout, "plan-timeout"}};
  std::string text;
  uint32_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if ((status & bit) == 0) continue;
    if (!text.empty()) text += '|';
    text += name;
  }
  if ((status & ~known) != 0) {
    text += fmt::format("{}unknown-0x{:x}", text.empty() ? "" : "|", status & ~known);
  }
  return text;
}

namespace {

// The options reproducing `policy`, or nullopt where the GPU planner does not (a policy outside
// the HALO-Q family, or a resident one: the GPU planner keeps no previous plan).
std::optional<GpuPlannerOptions> options_for(std::string_view policy) {
  const std::optional<HaloQVariant> variant = halo_q_variant(policy);
  if (!variant.has_value() || variant->resident) return std::nullopt;
  GpuPlannerOptions options;
  options.owner_home = variant->options.owner_home;
  options.absorb = variant->options.absorb;
  options.owner_in_group = variant->options.owner_in_group;
  options.min_move = variant->options.min_move;
  options.iser = variant->iser;
  return options;
}

// The first limit of the GPU planner that `topo` / `max_routes_per_rank` break, as its error
// message; empty when within every limit.
std::string limit_violation(const Topology& topo, int64_t max_routes_per_rank) {
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const int S = topo.num_slots;
  if (P < 2 || P > kGpuMaxRanks) {
    return fmt::format("GPU planner: P = {} ranks outside [2, {}]", P, kGpuMaxRanks);
  }
  if (E < P || E > kGpuMaxExperts || E % P != 0) {
    return fmt::format("GPU planner: E = {} experts must be a multiple of P = {} and at most {}", E,
                       P, kGpuMaxExperts);
  }
  if (S < 0 || S > kGpuMaxSlots) {
    return fmt::format("GPU planner: S = {} helper slots outside [0, {}]", S, kGpuMaxSlots);
  }
  if (topo.g_min < 1) return fmt::format("GPU planner: g_min = {} must be >= 1", topo.g_min);
  if (topo.num_teams() != 1) {
    return fmt::format(
        "GPU planner: LSA teams are not supported (lsa_size = {} < P = {}); plan on the CPU",
        topo.team_size(), P);
  }
  if (max_routes_per_rank < 1 || max_routes_per_rank > kGpuMaxRoutesPerRank) {
    return fmt::format("GPU planner: max routes per rank (tau * k) = {} outside [1, {}]",
                       max_routes_per_rank, kGpuMaxRoutesPerRank);
  }
  return {};
}

}  // namespace

bool gpu_planner_covers(std::string_view policy, const Topology& topo,
                        int64_t max_routes_per_rank) {
  return options_for(policy).has_value() && limit_violation(topo, max_routes_per_rank).empty();
}

GpuPlannerOptions gpu_planner_options(std::string_view policy) {
  const std::optional<GpuPlannerOptions> options = options_for(policy);
  ISER_CHECK(options.has_value(),
             "GPU planner: policy '{}' has no GPU planner (halo-q, owner-home, absorb, "
             "halo-q-owner-in and iser-stateless have; resident policies need the previous plan: "
             "for iser use iser-stateless, or the host planner)",
             policy);
  return *options;
}

GpuPlanLayout GpuPlanLayout::make(const Topology& topo, bool iser) {
  GpuPlanLayout layout;
  layout.num_ranks = topo.num_ranks;
  layout.num_experts = topo.num_experts;
  layout.num_slots = topo.num_slots;
  const int finest = topo.group_size(topo.num_levels() - 1);
  const int by_owner = topo.num_ranks * (iser ? topo.num_slots : topo.max_exports_per_owner());
  const int by_slots = topo.num_ranks * topo.num_slots / std::max(finest, 1);
  layout.max_broadcasts = std::max(1, std::min(by_owner, by_slots));
  return layout;
}

Plan plan_from_words(const GpuPlanLayout& layout, std::span<const int32_t> w) {
  ISER_CHECK(w.size() >= static_cast<size_t>(layout.total_words()),
             "GPU plan has {} words, expected {}", w.size(), layout.total_words());
  ISER_CHECK(w[GpuPlanLayout::kNumRanks] == layout.num_ranks &&
                 w[GpuPlanLayout::kNumExperts] == layout.num_experts &&
                 w[GpuPlanLayout::kNumSlots] == layout.num_slots &&
                 w[GpuPlanLayout::kMaxBroadcasts] == layout.max_broadcasts,
             "GPU plan header (P = {}, E = {}, S = {}, max broadcasts = {}) does not match the "
             "layout (P = {}, E = {}, S = {}, max broadcasts = {})",
             w[GpuPlanLayout::kNumRanks], w[GpuPlanLayout::kNumExperts],
             w[GpuPlanLayout::kNumSlots], w[GpuPlanLayout::kMaxBroadcasts], layout.num_ranks,
             layout.num_experts, layout.num_slots, layout.max_broadcasts);
  const int num_broadcasts = w[GpuPlanLayout::kNumBroadcasts];
  ISER_CHECK(num_broadcasts >= 0 && num_broadcasts <= layout.max_broadcasts,
             "GPU plan field num_broadcasts = {} outside [0, {}]", num_broadcasts,
             layout.max_broadcasts);
  const int P = layout.num_ranks;
  Plan plan;
  plan.num_ranks = P;
  plan.num_experts = layout.num_experts;
  plan.num_slots = layout.num_slots;
  plan.target = w[GpuPlanLayout::kTarget];
  plan.owner_uses_home_slot = (w[GpuPlanLayout::kFlags] & 1) != 0;
  plan.loads.assign(w.begin() + layout.loads(), w.begin() + layout.loads() + P);
  plan.broadcasts.resize(num_broadcasts);
  for (int b = 0; b < num_broadcasts; ++b) {
    const int32_t* rec =
        w.data() + layout.broadcasts() + static_cast<ptrdiff_t>(b) * GpuPlanLayout::kBroadcastWords;
    Broadcast& out = plan.broadcasts[b];
    out.expert = rec[GpuPlanLayout::kExpert];
    out.owner = rec[GpuPlanLayout::kOwner];
    out.level = rec[GpuPlanLayout::kLevel];
    out.group_begin = rec[GpuPlanLayout::kGroupBegin];
    out.group_size = rec[GpuPlanLayout::kGroupSize];
    out.helper = rec[GpuPlanLayout::kHelper];
    out.mode = static_cast<TransportMode>(rec[GpuPlanLayout::kMode]);
    out.resident = false;
    const int32_t* q = w.data() + layout.quotas() + static_cast<size_t>(b) * P;
    out.quota.assign(q, q + P);
  }
  return plan;
}

Plan download_plan(const GpuPlanLayout& layout, const int32_t* device_plan) {
  std::vector<int32_t> words(layout.total_words());
  ISER_CUDA_CHECK(cudaMemcpy(words.data(), device_plan, words.size() * sizeof(int32_t),
                             cudaMemcpyDeviceToHost));
  return plan_from_words(layout, words);
}

uint32_t download_plan_status(const int32_t* device_plan) {
  int32_t status = 0;
  ISER_CUDA_CHECK(cudaMemcpy(&status, device_plan + GpuPlanLayout::kStatus, sizeof(status),
                             cudaMemcpyDeviceToHost));
  return static_cast<uint32_t>(status);
}

struct GpuPlanner::Impl {
  Topology topo;
  GpuPlanLayout layout;
  GpuPlannerOptions options;
  int max_routes = 0;
  int max_rows = 0;
  int max_tiles = 0;
  int plan_smem = 0;
  int rewrite_smem = 0;
  int iser_blocks = cuda::kIserSequentialBlocks;  // PlanParams::iser_blocks
  // Routes per row of the last count() (rewrite() must follow a count() of the same shape).
  int counted_routes = -1;
  int counted_rows = 0;
  unsigned long long* timer = nullptr;
  RepairSchedule repair = RepairSchedule::kAuto;
  cuda::DeviceBuffer tile_counts;  // [max_rows][max_tiles][E]
  cuda::DeviceBuffer error_word;   // [1]
  // plan_rewrite(): the fused kernel's sync words (zero once, never reset), its shared memory and
  // the most CTAs one cooperative launch of it may have (0: not available).
  cuda::DeviceBuffer fused_sync;
  int fused_smem = 0;
  int fused_max_ctas = 0;
  int num_sms = 1;  // the device's, for RewriteParams::num_parts

  cuda::PlanParams plan_params(const int32_t* counts, int32_t* plans, int num_plans) const;
  // plan_rewrite() / plan_rewrite_all(): num_plans plans, then rows [first_rank, + num_rows).
  void launch_fused(const int32_t* counts, int32_t* plans, int num_plans, const int32_t* topk_ids,
                    int num_routes, int first_rank, int num_rows, int32_t* slot_ids,
                    CUstream_st* stream) const;
};

cuda::PlanParams GpuPlanner::Impl::plan_params(const int32_t* counts, int32_t* plans,
                                               int num_plans) const {
  cuda::PlanParams p;
  p.counts = counts;
  p.plans = plans;
  p.timer = timer;
  p.scheduled_repair =
      repair == RepairSchedule::kScheduled ||
      (repair == RepairSchedule::kAuto && topo.num_ranks >= kGpuScheduledRepairMinRanks);
  p.num_plans = num_plans;
  p.plan_words = layout.total_words();
  p.num_ranks = topo.num_ranks;
  p.num_experts = topo.num_experts;
  p.num_slots = topo.num_slots;
  p.num_levels = topo.num_levels();
  p.max_broadcasts = layout.max_broadcasts;
  p.max_count = max_routes;
  p.min_move = options.min_move;
  p.owner_home = options.owner_home;
  p.absorb = options.absorb;
  p.owner_in_group = options.owner_in_group;
  p.iser = options.iser;
  p.iser_blocks = iser_blocks;
  if (p.iser) {  // plan_iser runs HALO-Q's reference placement as one of its candidates
    p.absorb = false;
    p.owner_in_group = false;
  }
  return p;
}

GpuPlanner::GpuPlanner(const Topology& topo, int max_routes_per_rank,
                       const GpuPlannerOptions& options, int max_rows) {
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const int S = topo.num_slots;
  const std::string limit = limit_violation(topo, max_routes_per_rank);
  ISER_CHECK(limit.empty(), "{}", limit);
  ISER_CHECK(max_rows >= 1 && max_rows <= 65535, "GPU planner: max rows = {} outside [1, 65535]",
             max_rows);
  ISER_CHECK(options.min_move >= 0, "GPU planner: min_move = {} must be >= 0", options.min_move);
  impl_ = new Impl{};
  try {
    Impl& d = *impl_;
    d.topo = topo;
    d.layout = GpuPlanLayout::make(topo, options.iser);
    d.options = options;
    d.max_routes = max_routes_per_rank;
    d.max_rows = max_rows;
    d.max_tiles = cuda::num_route_tiles(max_routes_per_rank);
    d.tile_counts =
        cuda::DeviceBuffer(static_cast<size_t>(max_rows) * d.max_tiles * E * sizeof(int32_t));
    d.error_word = cuda::DeviceBuffer(sizeof(uint32_t));
    ISER_CUDA_CHECK(cudaMemset(d.error_word.get<uint32_t>(), 0, sizeof(uint32_t)));

    cuda::PlanParams plan_params;
    plan_params.num_ranks = P;
    plan_params.num_experts = E;
    plan_params.num_slots = S;
    plan_params.max_broadcasts = d.layout.max_broadcasts;
    plan_params.iser = options.iser;
    int device = 0;
    int smem_optin = 0;
    ISER_CUDA_CHECK(cudaGetDevice(&device));
    ISER_CUDA_CHECK(
        cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (options.iser) {  // every candidate on its own warp where its block fits (plan_iser.cuh)
      plan_params.iser_blocks = cuda::kIserParallelBlocks;
      // NOTE: 1 KiB below the limit: the kernels' static shared arrays come off it too.
      if (options.iser_sequential || cuda::plan_smem_bytes(plan_params) > smem_optin - 1024) {
        plan_params.iser_blocks = cuda::kIserSequentialBlocks;
      }
      ISER_CHECK(cuda::plan_finish_scratch_fits(plan_params),
                 "GPU planner (internal): P = {}, {} broadcasts: the stage-4 lists cannot hold "
                 "the finish scratch of iser's sequential form",
                 P, plan_params.max_broadcasts);
      d.iser_blocks = plan_params.iser_blocks;
    }
    d.plan_smem = cuda::plan_smem_bytes(plan_params);
    cuda::RewriteParams rewrite_params;
    rewrite_params.max_broadcasts = d.layout.max_broadcasts;
    rewrite_params.num_experts = E;
    rewrite_params.num_ranks = P;
    d.rewrite_smem = cuda::rewrite_smem_bytes(rewrite_params);
    cuda::CountParams count_params;  // the most tiles per CTA: the longest rows
    count_params.num_tiles = d.max_tiles;
    count_params.num_experts = E;
    const int count_smem = cuda::count_smem_bytes(count_params);
    ISER_CUDA_CHECK(cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, device));
    ISER_CHECK(
        d.plan_smem <= smem_optin && d.rewrite_smem <= smem_optin && count_smem <= smem_optin,
        "GPU planner: P = {}, E = {}, S = {} needs {} / {} / {} bytes of shared memory "
        "(plan / rewrite / count), the device allows {}",
        P, E, S, d.plan_smem, d.rewrite_smem, count_smem, smem_optin);
    cuda::prepare_count_kernel(count_smem);
    cuda::prepare_plan_kernel(d.plan_smem);
    cuda::prepare_rewrite_kernel(d.rewrite_smem);
    cuda::PlanRewriteParams fused;
    fused.plan = plan_params;
    d.fused_smem = cuda::plan_rewrite_smem_bytes(fused);
    if (d.fused_smem <= smem_optin) {
      d.fused_max_ctas = cuda::prepare_plan_rewrite_kernel(d.fused_smem, options.iser);
    }
    d.fused_sync = cuda::DeviceBuffer(cuda::plan_rewrite_sync_words(max_rows) * sizeof(uint32_t));
    ISER_CUDA_CHECK(cudaMemset(d.fused_sync.get<uint32_t>(), 0, d.fused_sync.bytes()));
    // NOTE: cudaMemset runs on the default stream and may return before it lands; nothing orders
    // a caller's non-blocking stream after it. Without this wait, a count() issued right after
    // construction could have its error bits cleared, or a fused kernel read unzeroed sync words.
    // Set-up only: no per-invocation call waits.
    ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  } catch (...) {
    delete impl_;
    throw;
  }
}

GpuPlanner::~GpuPlanner() {
  delete impl_;
}
GpuPlanner::GpuPlanner(GpuPlanner&& other) noexcept : impl_(std::exchange(other.impl_, nullptr)) {}
GpuPlanner& GpuPlanner::operator=(GpuPlanner&& other) noexcept {
  std::swap(impl_, other.impl_);
  return *this;
}

const Topology& GpuPlanner::topology() const {
  return impl_->topo;
}
const GpuPlanLayout& GpuPlanner::layout() const {
  return impl_->layout;
}
const GpuPlannerOptions& GpuPlanner::options() const {
  return impl_->options;
}
uint32_t* GpuPlanner::error_word() const {
  return impl_->error_word.get<uint32_t>();
}
void GpuPlanner::set_plan_timer(unsigned long long* device_timer) {
  impl_->timer = device_timer;
}
void GpuPlanner::set_repair_schedule(RepairSchedule schedule) {
  impl_->repair = schedule;
}

void GpuPlanner::clear_errors(CUstream_st* stream) {
  ISER_CUDA_CHECK(cudaMemsetAsync(impl_->error_word.get<uint32_t>(), 0, sizeof(uint32_t), stream));
}

uint32_t GpuPlanner::read_errors() const {
  uint32_t value = 0;
  ISER_CUDA_CHECK(
      cudaMemcpy(&value, impl_->error_word.get<uint32_t>(), sizeof(value), cudaMemcpyDeviceToHost));
  return value;
}

GpuPlanner::CountOutputs GpuPlanner::count_outputs(int num_tokens, int top_k, int num_rows) {
  Impl& d = *impl_;
  ISER_CHECK(num_tokens >= 0 && top_k >= 1, "GPU count: invalid num_tokens = {}, top_k = {}",
             num_tokens, top_k);
  const int64_t routes = static_cast<int64_t>(num_tokens) * top_k;
  ISER_CHECK(routes <= d.max_routes,
             "GPU count: tau * k = {} * {} = {} routes exceed the planner's limit {}", num_tokens,
             top_k, routes, d.max_routes);
  ISER_CHECK(num_rows >= 1 && num_rows <= d.max_rows, "GPU count: num_rows = {} outside [1, {}]",
             num_rows, d.max_rows);
  d.counted_routes = static_cast<int>(routes);
  d.counted_rows = num_rows;
  return {d.tile_counts.get<int32_t>(), d.error_word.get<uint32_t>()};
}

void GpuPlanner::count(const int32_t* topk_ids, int num_tokens, int top_k, int32_t* counts,
                       CUstream_st* stream, int num_rows) {
  const CountOutputs outputs = count_outputs(num_tokens, top_k, num_rows);
  const Impl& d = *impl_;
  cuda::CountParams p;
  p.topk_ids = topk_ids;
  p.counts = counts;
  p.tile_counts = outputs.tile_counts;
  p.error_word = outputs.error_word;
  p.num_rows = num_rows;
  p.num_routes = d.counted_routes;
  p.num_tiles = cuda::num_route_tiles(p.num_routes);
  p.num_experts = d.topo.num_experts;
  cuda::launch_count(p, stream);
}

void GpuPlanner::plan(const int32_t* counts, int32_t* plans, CUstream_st* stream, int num_plans) {
  const Impl& d = *impl_;
  ISER_CHECK(num_plans >= 1, "GPU plan: num_plans = {} must be >= 1", num_plans);
  cuda::launch_plan(d.plan_params(counts, plans, num_plans), stream);
}

namespace {

void launch_rewrite_rows(const GpuPlanner& planner, int max_broadcasts, int num_sms,
                         const int32_t* tile_counts, uint32_t* error_word, const int32_t* topk_ids,
                         int num_routes, int first_rank, int num_rows, const int32_t* counts,
                         const int32_t* plans, int32_t* slot_ids, CUstream_st* stream) {
  const Topology& topo = planner.topology();
  cuda::RewriteParams p;
  p.topk_ids = topk_ids;
  p.counts = counts;
  p.plans = plans;
  p.tile_counts = tile_counts;
  p.slot_ids = slot_ids;
  p.error_word = error_word;
  p.num_rows = num_rows;
  p.first_rank = first_rank;
  p.num_routes = num_routes;
  p.num_tiles = cuda::num_route_tiles(num_routes);
  p.plan_words = planner.plan_words();
  p.num_ranks = topo.num_ranks;
  p.num_experts = topo.num_experts;
  p.num_slots = topo.num_slots;
  p.max_broadcasts = max_broadcasts;
  // One CTA per SM at most: one row's 24 tiles at tau * k = 49,152 split 4 ways over 96 SMs.
  p.num_parts = cuda::tile_parts(static_cast<long long>(p.num_tiles) * num_rows, num_sms,
                                 cuda::kRewriteMaxParts);
  cuda::launch_rewrite(p, stream);
}

}  // namespace

void GpuPlanner::rewrite(const int32_t* topk_ids, int num_tokens, int top_k, int rank_idx,
                         const int32_t* counts, const int32_t* plan, int32_t* slot_ids,
                         CUstream_st* stream) {
  const Impl& d = *impl_;
  const int64_t routes = static_cast<int64_t>(num_tokens) * top_k;
  ISER_CHECK(rank_idx >= 0 && rank_idx < d.topo.num_ranks, "GPU rewrite: rank {} outside [0, {})",
             rank_idx, d.topo.num_ranks);
  ISER_CHECK(routes == d.counted_routes && d.counted_rows == 1,
             "GPU rewrite: {} routes of one row, but the last count() saw {} routes x {} rows "
             "(count the same ids first)",
             routes, d.counted_routes, d.counted_rows);
  launch_rewrite_rows(*this, d.layout.max_broadcasts, d.num_sms, d.tile_counts.get<int32_t>(),
                      d.error_word.get<uint32_t>(), topk_ids, static_cast<int>(routes), rank_idx, 1,
                      counts, plan, slot_ids, stream);
}

void GpuPlanner::rewrite_all(const int32_t* topk_ids, int num_tokens, int top_k,
                             const int32_t* counts, const int32_t* plans, int num_plans,
                             int32_t* slot_ids, CUstream_st* stream) {
  const Impl& d = *impl_;
  const int64_t routes = static_cast<int64_t>(num_tokens) * top_k;
  const int64_t rows = static_cast<int64_t>(num_plans) * d.topo.num_ranks;
  ISER_CHECK(num_plans >= 1 && routes == d.counted_routes && rows == d.counted_rows,
             "GPU rewrite_all: {} plans x {} ranks x {} routes, but the last count() saw {} "
             "rows x {} routes (count the same ids first)",
             num_plans, d.topo.num_ranks, routes, d.counted_rows, d.counted_routes);
  launch_rewrite_rows(*this, d.layout.max_broadcasts, d.num_sms, d.tile_counts.get<int32_t>(),
                      d.error_word.get<uint32_t>(), topk_ids, static_cast<int>(routes), 0,
                      static_cast<int>(rows), counts, plans, slot_ids, stream);
}

void GpuPlanner::Impl::launch_fused(const int32_t* counts, int32_t* plans, int num_plans,
                                    const int32_t* topk_ids, int num_routes, int first_rank,
                                    int num_rows, int32_t* slot_ids, CUstream_st* stream) const {
  ISER_CHECK(fused_max_ctas >= 2,
             "GPU plan_rewrite: the fused kernel needs {} bytes of shared memory per CTA, two "
             "co-resident CTAs and cooperative launch; not available on this device (use plan() "
             "then rewrite())",
             fused_smem);
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const int num_tiles = cuda::num_route_tiles(num_routes);
  // A CTA per plan and at least as many for the tiles: batches of more plans launch in chunks
  // (rewrite_all's rows of a chunk's plans with them; one launch for plan_rewrite()).
  const int chunk = std::max(1, fused_max_ctas / 2);
  for (int first_plan = 0; first_plan < num_plans; first_plan += chunk) {
    const int n = std::min(chunk, num_plans - first_plan);
    const int64_t first_row = static_cast<int64_t>(first_plan) * P;
    cuda::PlanRewriteParams p;
    p.plan =
        plan_params(counts + first_row * E, plans + first_plan * int64_t{layout.total_words()}, n);
    p.topk_ids = topk_ids + first_row * num_routes;
    p.tile_counts = tile_counts.get<int32_t>() + first_row * num_tiles * E;
    p.slot_ids = slot_ids + first_row * num_routes;
    p.error_word = error_word.get<uint32_t>();
    p.sync = fused_sync.get<uint32_t>();
    p.num_rows = num_plans == 1 ? num_rows : n * P;
    p.first_rank = first_rank;
    p.num_routes = num_routes;
    p.num_tiles = num_tiles;
    p.wait_ns = kGpuPlanWaitNs;
    cuda::launch_plan_rewrite(p, fused_max_ctas, stream);
  }
}

void GpuPlanner::plan_rewrite(const int32_t* counts, int32_t* plan, const int32_t* topk_ids,
                              int num_tokens, int top_k, int rank_idx, int32_t* slot_ids,
                              CUstream_st* stream) {
  const Impl& d = *impl_;
  const int64_t routes = static_cast<int64_t>(num_tokens) * top_k;
  ISER_CHECK(rank_idx >= 0 && rank_idx < d.topo.num_ranks,
             "GPU plan_rewrite: rank {} outside [0, {})", rank_idx, d.topo.num_ranks);
  ISER_CHECK(routes == d.counted_routes && d.counted_rows == 1,
             "GPU plan_rewrite: {} routes of one row, but the last count() saw {} routes x {} rows "
             "(count the same ids first)",
             routes, d.counted_routes, d.counted_rows);
  d.launch_fused(counts, plan, 1, topk_ids, static_cast<int>(routes), rank_idx, 1, slot_ids,
                 stream);
}

void GpuPlanner::plan_rewrite_all(const int32_t* counts, int32_t* plans, const int32_t* topk_ids,
                                  int num_tokens, int top_k, int num_plans, int32_t* slot_ids,
                                  CUstream_st* stream) {
  const Impl& d = *impl_;
  const int64_t routes = static_cast<int64_t>(num_tokens) * top_k;
  const int64_t rows = static_cast<int64_t>(num_plans) * d.topo.num_ranks;
  ISER_CHECK(num_plans >= 1 && routes == d.counted_routes && rows == d.counted_rows,
             "GPU plan_rewrite_all: {} plans x {} ranks x {} routes, but the last count() saw {} "
             "rows x {} routes (count the same ids first)",
             num_plans, d.topo.num_ranks, routes, d.counted_rows, d.counted_routes);
  d.launch_fused(counts, plans, num_plans, topk_ids, static_cast<int>(routes), 0,
                 static_cast<int>(rows), slot_ids, stream);
}

}  // namespace iser
