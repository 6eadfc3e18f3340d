// PyTorch ops of the GPU planner (include/iser/gpu_planner.h) on CUDA tensors, on the current
// stream: torch.ops.iser.count / plan / rewrite / plan_rewrite, and CPU reference ops
// (plan_reference / rewrite_reference: the CPU planner and rewrite, the GPU ops' oracle).
// Fake (meta) kernels live in python/iser/torch/_ops.py, so the ops trace under torch.compile;
// nothing here synchronises with the host, so they can be captured in a CUDA graph once a call
// of the same (P, E, S, policy) ran outside the capture (that call builds the planner).
//
// The ops are functions: rewrite and plan_rewrite count their ids again on the device (the GPU
// rewrite needs per-tile counts of the same ids, which the planner keeps), so no hidden state
// joins two calls. Planners are cached per (device, P, E, S, policy); calls that share one
// share its scratch memory: use one shape from one stream at a time.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/planner.h"
#include "iser/rewrite.h"
#include "iser/validator.h"

namespace iser::torch_ops {
namespace {

// Rows one count() launch handles (larger batches run in chunks).
constexpr int kCountRows = 16;

using PlannerKey = std::tuple<int, int, int, int, std::string>;

GpuPlanner& planner_for(int device, int num_ranks, int num_experts, int num_slots,
                        const std::string& policy) {
  static std::mutex mutex;
  static std::map<PlannerKey, std::unique_ptr<GpuPlanner>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const PlannerKey key{device, num_ranks, num_experts, num_slots, policy};
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  TORCH_CHECK(c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
              "iser: the first call for P = ", num_ranks, ", E = ", num_experts,
              ", S = ", num_slots, ", policy '", policy,
              "' is inside a CUDA graph capture; call the op once before capturing (it builds "
              "the planner)");
  // Plans check every count against the planner's largest routes per rank (kGpuBadCounts), so
  // the cached planner takes the largest the GPU planner supports.
  auto planner =
      std::make_unique<GpuPlanner>(Topology::make(num_ranks, num_experts, num_slots),
                                   kGpuMaxRoutesPerRank, gpu_planner_options(policy), kCountRows);
  return *cache.emplace(key, std::move(planner)).first->second;
}

void check_cuda_int(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "iser: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, "iser: ", name,
              " must be int32 or int64, got ", t.scalar_type());
}

at::Tensor as_int32(const at::Tensor& t) {
  return t.to(at::kInt).contiguous();
}

// (routes per row, top_k, rows) of ids [..., T, k].
std::tuple<int64_t, int64_t, int64_t> route_shape(const at::Tensor& ids) {
  TORCH_CHECK(ids.dim() >= 2, "iser: topk_ids must be [..., num_tokens, top_k], got shape ",
              ids.sizes());
  const int64_t top_k = ids.size(-1);
  const int64_t tokens = ids.size(-2);
  TORCH_CHECK(top_k >= 1, "iser: topk_ids: top_k = 0");
  TORCH_CHECK(tokens * top_k <= kGpuMaxRoutesPerRank,
              "iser: topk_ids: num_tokens x top_k = ", tokens * top_k, " exceeds ",
              kGpuMaxRoutesPerRank, " routes per rank");
  const int64_t rows = tokens == 0 ? 0 : ids.numel() / (tokens * top_k);
  return {tokens, top_k, rows};
}

void check_counts(const at::Tensor& counts, int64_t num_slots) {
  check_cuda_int(counts, "counts");
  TORCH_CHECK(counts.dim() >= 2, "iser: counts must be [..., P, E], got shape ", counts.sizes());
  TORCH_CHECK(num_slots >= 1 && num_slots <= kGpuMaxSlots, "iser: num_slots = ", num_slots,
              " not in [1, ", kGpuMaxSlots, "]");
}

at::Tensor count_cuda(const at::Tensor& topk_ids, int64_t num_experts) {
  check_cuda_int(topk_ids, "topk_ids");
  TORCH_CHECK(num_experts >= 2 && num_experts <= kGpuMaxExperts,
              "iser: num_experts = ", num_experts, " not in [2, ", kGpuMaxExperts, "]");
  const c10::cuda::CUDAGuard guard(topk_ids.device());
  const auto [tokens, top_k, rows] = route_shape(topk_ids);
  std::vector<int64_t> shape(topk_ids.sizes().begin(), topk_ids.sizes().end() - 2);
  shape.push_back(num_experts);
  at::Tensor counts = at::zeros(shape, topk_ids.options().dtype(at::kInt));
  if (rows == 0 || tokens == 0) return counts;
  const at::Tensor ids = as_int32(topk_ids);
  // The count kernel belongs to a planner of some topology with E experts: P = the smallest
  // divisor of E the GPU planner takes.
  int num_ranks = 2;
  while (num_ranks <= kGpuMaxRanks && num_experts % num_ranks != 0) ++num_ranks;
  TORCH_CHECK(num_ranks <= kGpuMaxRanks, "iser: count: num_experts = ", num_experts,
              " has no divisor in [2, ", kGpuMaxRanks, "] (the GPU planner's P)");
  GpuPlanner& planner =
      planner_for(topk_ids.get_device(), num_ranks, static_cast<int>(num_experts), 1, "halo-q");
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t routes = tokens * top_k;
  for (int64_t row = 0; row < rows; row += kCountRows) {
    const int n = static_cast<int>(std::min<int64_t>(kCountRows, rows - row));
    planner.count(ids.data_ptr<int32_t>() + row * routes, static_cast<int>(tokens),
                  static_cast<int>(top_k), counts.data_ptr<int32_t>() + row * num_experts, stream,
                  n);
  }
  return counts;
}

at::Tensor plan_cuda(const at::Tensor& counts_in, int64_t num_slots, c10::string_view policy) {
  check_counts(counts_in, num_slots);
  const c10::cuda::CUDAGuard guard(counts_in.device());
  const at::Tensor counts = as_int32(counts_in);
  const int P = static_cast<int>(counts.size(-2));
  const int E = static_cast<int>(counts.size(-1));
  GpuPlanner& planner =
      planner_for(counts.get_device(), P, E, static_cast<int>(num_slots), std::string(policy));
  const int64_t num_plans = counts.numel() / (int64_t{P} * E);
  std::vector<int64_t> shape(counts.sizes().begin(), counts.sizes().end() - 2);
  shape.push_back(planner.plan_words());
  // Zeroed: the kernel writes the meaningful words only (unused broadcast rows stay as they
  // are), and equal inputs should give equal tensors.
  at::Tensor plans = at::zeros(shape, counts.options());
  if (num_plans > 0) {
    planner.plan(counts.data_ptr<int32_t>(), plans.data_ptr<int32_t>(),
                 at::cuda::getCurrentCUDAStream().stream(), static_cast<int>(num_plans));
  }
  return plans;
}

// Checks shared by rewrite and plan_rewrite; returns the planner.
GpuPlanner& rewrite_planner(const at::Tensor& counts, const at::Tensor& topk_ids, int64_t rank,
                            int64_t num_slots, c10::string_view policy) {
  check_counts(counts, num_slots);
  check_cuda_int(topk_ids, "topk_ids");
  TORCH_CHECK(counts.dim() == 2, "iser: counts must be [P, E], got shape ", counts.sizes());
  TORCH_CHECK(topk_ids.dim() == 2, "iser: topk_ids must be [num_tokens, top_k], got shape ",
              topk_ids.sizes());
  TORCH_CHECK(counts.device() == topk_ids.device(), "iser: counts on ", counts.device(),
              " but topk_ids on ", topk_ids.device());
  const int P = static_cast<int>(counts.size(0));
  TORCH_CHECK(rank >= 0 && rank < P, "iser: rank = ", rank, " not in [0, P = ", P, ")");
  route_shape(topk_ids);
  return planner_for(counts.get_device(), P, static_cast<int>(counts.size(1)),
                     static_cast<int>(num_slots), std::string(policy));
}

at::Tensor rewrite_cuda(const at::Tensor& plan, const at::Tensor& counts_in,
                        const at::Tensor& topk_ids, int64_t rank, int64_t num_slots,
                        c10::string_view policy) {
  const c10::cuda::CUDAGuard guard(counts_in.device());
  GpuPlanner& planner = rewrite_planner(counts_in, topk_ids, rank, num_slots, policy);
  check_cuda_int(plan, "plan");
  TORCH_CHECK(plan.dim() == 1 && plan.size(0) == planner.plan_words(), "iser: plan must be [",
              planner.plan_words(), "] int32 words, got shape ", plan.sizes());
  const at::Tensor counts = as_int32(counts_in);
  const at::Tensor ids = as_int32(topk_ids);
  const at::Tensor words = as_int32(plan);
  at::Tensor slot_ids = at::empty_like(ids);
  const int tokens = static_cast<int>(ids.size(0));
  const int top_k = static_cast<int>(ids.size(1));
  if (tokens == 0) return slot_ids;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  at::Tensor row = at::empty({counts.size(1)}, counts.options());
  planner.count(ids.data_ptr<int32_t>(), tokens, top_k, row.data_ptr<int32_t>(), stream);
  planner.rewrite(ids.data_ptr<int32_t>(), tokens, top_k, static_cast<int>(rank),
                  counts.data_ptr<int32_t>(), words.data_ptr<int32_t>(),
                  slot_ids.data_ptr<int32_t>(), stream);
  return slot_ids;
}

std::tuple<at::Tensor, at::Tensor> plan_rewrite_cuda(const at::Tensor& counts_in,
                                                     const at::Tensor& topk_ids, int64_t rank,
                                                     int64_t num_slots, c10::string_view policy) {
  const c10::cuda::CUDAGuard guard(counts_in.device());
  GpuPlanner& planner = rewrite_planner(counts_in, topk_ids, rank, num_slots, policy);
  const at::Tensor counts = as_int32(counts_in);
  const at::Tensor ids = as_int32(topk_ids);
  at::Tensor plan = at::zeros({planner.plan_words()}, counts.options());  // as plan_cuda
  at::Tensor slot_ids = at::empty_like(ids);
  const int tokens = static_cast<int>(ids.size(0));
  const int top_k = static_cast<int>(ids.size(1));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  if (tokens == 0) {
    planner.plan(counts.data_ptr<int32_t>(), plan.data_ptr<int32_t>(), stream);
    return {plan, slot_ids};
  }
  at::Tensor row = at::empty({counts.size(1)}, counts.options());
  planner.count(ids.data_ptr<int32_t>(), tokens, top_k, row.data_ptr<int32_t>(), stream);
  planner.plan_rewrite(counts.data_ptr<int32_t>(), plan.data_ptr<int32_t>(),
                       ids.data_ptr<int32_t>(), tokens, top_k, static_cast<int>(rank),
                       slot_ids.data_ptr<int32_t>(), stream);
  return {plan, slot_ids};
}

// ---- CPU reference ----------------------------------------------------------------------------

HaloQOptions cpu_options(const GpuPlannerOptions& gpu) {
  HaloQOptions options;
  options.owner_home = gpu.owner_home;
  options.absorb = gpu.absorb;
  options.owner_in_group = gpu.owner_in_group;
  options.min_move = gpu.min_move;
  return options;
}

// The plan layout of `policy`'s plans (iser plans may hold more broadcasts).
GpuPlanLayout layout_for(const Topology& topo, c10::string_view policy) {
  return GpuPlanLayout::make(topo, gpu_planner_options(std::string(policy)).iser);
}

void check_cpu_int(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), "iser: ", name, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, "iser: ", name,
              " must be int32 or int64, got ", t.scalar_type());
}

CountMatrix count_matrix(const at::Tensor& counts, int64_t plan_idx) {
  const int P = static_cast<int>(counts.size(-2));
  const int E = static_cast<int>(counts.size(-1));
  CountMatrix m(P, E);
  const int32_t* src = counts.data_ptr<int32_t>() + plan_idx * P * E;
  std::copy(src, src + int64_t{P} * E, m.data().begin());
  return m;
}

// The plan in GpuPlanLayout words: header, loads, the B broadcast records and quota rows; the
// rest (unused rows, rewrite tables) zero.
void encode_plan(const GpuPlanLayout& layout, const Plan& plan, int32_t* words) {
  std::fill(words, words + layout.total_words(), 0);
  words[GpuPlanLayout::kTarget] = plan.target;
  words[GpuPlanLayout::kNumBroadcasts] = static_cast<int32_t>(plan.broadcasts.size());
  words[GpuPlanLayout::kFlags] = plan.owner_uses_home_slot ? 1 : 0;
  words[GpuPlanLayout::kNumRanks] = layout.num_ranks;
  words[GpuPlanLayout::kNumExperts] = layout.num_experts;
  words[GpuPlanLayout::kNumSlots] = layout.num_slots;
  words[GpuPlanLayout::kMaxBroadcasts] = layout.max_broadcasts;
  std::copy(plan.loads.begin(), plan.loads.end(), words + layout.loads());
  TORCH_CHECK(static_cast<int>(plan.broadcasts.size()) <= layout.max_broadcasts,
              "iser: the CPU plan has ", plan.broadcasts.size(), " broadcasts, more than ",
              layout.max_broadcasts);
  for (size_t b = 0; b < plan.broadcasts.size(); ++b) {
    const Broadcast& bc = plan.broadcasts[b];
    int32_t* rec = words + layout.broadcasts() + b * GpuPlanLayout::kBroadcastWords;
    rec[GpuPlanLayout::kExpert] = bc.expert;
    rec[GpuPlanLayout::kOwner] = bc.owner;
    rec[GpuPlanLayout::kLevel] = bc.level;
    rec[GpuPlanLayout::kGroupBegin] = bc.group_begin;
    rec[GpuPlanLayout::kGroupSize] = bc.group_size;
    rec[GpuPlanLayout::kHelper] = bc.helper;
    rec[GpuPlanLayout::kMode] = static_cast<int32_t>(bc.mode);
    std::copy(bc.quota.begin(), bc.quota.end(), words + layout.quotas() + b * layout.num_ranks);
  }
}

at::Tensor plan_reference(const at::Tensor& counts_in, int64_t num_slots, c10::string_view policy) {
  check_cpu_int(counts_in, "counts");
  TORCH_CHECK(counts_in.dim() >= 2, "iser: counts must be [..., P, E], got ", counts_in.sizes());
  const at::Tensor counts = counts_in.to(at::kInt).contiguous();
  const int P = static_cast<int>(counts.size(-2));
  const int E = static_cast<int>(counts.size(-1));
  const Topology topo = Topology::make(P, E, static_cast<int>(num_slots));
  const GpuPlannerOptions gpu = gpu_planner_options(std::string(policy));
  const GpuPlanLayout layout = GpuPlanLayout::make(topo, gpu.iser);
  const HaloQOptions options = cpu_options(gpu);
  const int64_t num_plans = counts.numel() / (int64_t{P} * E);
  std::vector<int64_t> shape(counts.sizes().begin(), counts.sizes().end() - 2);
  shape.push_back(layout.total_words());
  at::Tensor out = at::empty(shape, counts.options());
  PlannerWorkspace ws;
  Plan plan;
  for (int64_t i = 0; i < num_plans; ++i) {
    if (gpu.iser) {
      plan_iser(topo, count_matrix(counts, i), options, ws, plan);
    } else {
      plan_halo_q(topo, count_matrix(counts, i), options, ws, plan);
    }
    encode_plan(layout, plan, out.data_ptr<int32_t>() + i * layout.total_words());
  }
  return out;
}

at::Tensor rewrite_reference(const at::Tensor& plan, const at::Tensor& counts_in,
                             const at::Tensor& topk_ids, int64_t rank, int64_t num_slots,
                             c10::string_view policy) {
  check_cpu_int(plan, "plan");
  check_cpu_int(counts_in, "counts");
  check_cpu_int(topk_ids, "topk_ids");
  TORCH_CHECK(counts_in.dim() == 2 && topk_ids.dim() == 2,
              "iser: counts [P, E] and topk_ids [num_tokens, top_k] expected, got ",
              counts_in.sizes(), " and ", topk_ids.sizes());
  const at::Tensor counts = counts_in.to(at::kInt).contiguous();
  const at::Tensor ids = topk_ids.to(at::kInt).contiguous();
  const at::Tensor words = plan.to(at::kInt).contiguous();
  const Topology topo =
      Topology::make(static_cast<int>(counts.size(0)), static_cast<int>(counts.size(1)),
                     static_cast<int>(num_slots));
  const GpuPlanLayout layout = layout_for(topo, policy);  // the same policies as the GPU ops
  const Plan decoded =
      plan_from_words(layout, std::span<const int32_t>(words.data_ptr<int32_t>(), words.numel()));
  at::Tensor slot_ids = at::empty_like(ids);
  rewrite_tokens(topo, count_matrix(counts, 0), decoded, static_cast<int>(rank),
                 std::span<const int32_t>(ids.data_ptr<int32_t>(), ids.numel()),
                 static_cast<int>(ids.size(1)),
                 std::span<int32_t>(slot_ids.data_ptr<int32_t>(), slot_ids.numel()));
  return slot_ids;
}

// The validator's violations of plan words (GPU layout) for counts [P, E]; empty: valid.
std::vector<std::string> validate_plan_words(const at::Tensor& plan, const at::Tensor& counts_in,
                                             int64_t num_slots, c10::string_view policy) {
  check_cpu_int(plan, "plan");
  check_cpu_int(counts_in, "counts");
  TORCH_CHECK(counts_in.dim() == 2, "iser: counts must be [P, E], got ", counts_in.sizes());
  const at::Tensor counts = counts_in.to(at::kInt).contiguous();
  const at::Tensor words = plan.to(at::kInt).contiguous();
  const Topology topo =
      Topology::make(static_cast<int>(counts.size(0)), static_cast<int>(counts.size(1)),
                     static_cast<int>(num_slots));
  const Plan decoded = plan_from_words(
      layout_for(topo, policy), std::span<const int32_t>(words.data_ptr<int32_t>(), words.numel()));
  return validate_plan(topo, count_matrix(counts, 0), decoded);
}

// [total words, loads, broadcasts, quotas, expert_broadcast, supply_begin, demand_end,
//  max_broadcasts] of GpuPlanLayout for (P, E, S) and the policy's plans.
std::vector<int64_t> plan_layout(int64_t num_ranks, int64_t num_experts, int64_t num_slots,
                                 c10::string_view policy) {
  const GpuPlanLayout l =
      layout_for(Topology::make(static_cast<int>(num_ranks), static_cast<int>(num_experts),
                                static_cast<int>(num_slots)),
                 policy);
  return {l.total_words(),      l.loads(),        l.broadcasts(), l.quotas(),
          l.expert_broadcast(), l.supply_begin(), l.demand_end(), l.max_broadcasts};
}

}  // namespace

TORCH_LIBRARY(iser, m) {
  m.def("count(Tensor topk_ids, int num_experts) -> Tensor");
  m.def("plan(Tensor counts, int num_slots, str policy='halo-q') -> Tensor");
  m.def(
      "rewrite(Tensor plan, Tensor counts, Tensor topk_ids, int rank, int num_slots, "
      "str policy='halo-q') -> Tensor");
  m.def(
      "plan_rewrite(Tensor counts, Tensor topk_ids, int rank, int num_slots, "
      "str policy='halo-q') -> (Tensor, Tensor)");
  m.def("plan_reference(Tensor counts, int num_slots, str policy='halo-q') -> Tensor");
  m.def(
      "rewrite_reference(Tensor plan, Tensor counts, Tensor topk_ids, int rank, int num_slots, "
      "str policy='halo-q') -> Tensor");
  m.def("validate_plan(Tensor plan, Tensor counts, int num_slots, str policy='halo-q') -> str[]");
  m.def("plan_layout(int num_ranks, int num_experts, int num_slots, str policy='halo-q') -> int[]",
        &plan_layout);
}

TORCH_LIBRARY_IMPL(iser, CUDA, m) {
  m.impl("count", &count_cuda);
  m.impl("plan", &plan_cuda);
  m.impl("rewrite", &rewrite_cuda);
  m.impl("plan_rewrite", &plan_rewrite_cuda);
}

TORCH_LIBRARY_IMPL(iser, CPU, m) {
  m.impl("plan_reference", &plan_reference);
  m.impl("rewrite_reference", &rewrite_reference);
  m.impl("validate_plan", &validate_plan_words);
}

}  // namespace iser::torch_ops
