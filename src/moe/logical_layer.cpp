// Single-process reference EP MoE layer (include/iser/moe_layer.h).
#include <cuda_runtime.h>

#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/counts.h"
#include "iser/error.h"
#include "iser/moe_layer.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/validator.h"

namespace iser::moe {

using cuda::DeviceBuffer;

struct LogicalEpLayer::Impl {
  LayerConfig config;
  const ExpertBank* experts = nullptr;
  std::unique_ptr<Policy> policy;
  std::vector<ExpertBank> helpers;  // per rank: S helper slots (none when S = 0)
  std::vector<GroupedMlp> mlps;     // per rank: H home + S helper slots
  DeviceBuffer x_perm, y_perm;      // [P * tau * k, He]
  DeviceBuffer gather_map, route_row, route_weight;

  int64_t num_routes() const {
    return int64_t{config.topo.num_ranks} * config.tokens_per_rank * config.top_k;
  }
};

LogicalEpLayer::LogicalEpLayer(const LayerConfig& config, const ExpertBank& experts)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.config = config;
  s.experts = &experts;
  const Topology& topo = config.topo;
  config.shape.check();
  ISER_CHECK(config.top_k >= 1 && config.top_k <= topo.num_experts,
             "layer: top_k = {} outside [1, E = {}]", config.top_k, topo.num_experts);
  ISER_CHECK(config.tokens_per_rank >= 1, "layer: tokens_per_rank = {} must be positive",
             config.tokens_per_rank);
  ISER_CHECK(experts.num_slots() == topo.num_experts, "layer: expert bank has {} slots, E = {}",
             experts.num_slots(), topo.num_experts);
  ISER_CHECK(experts.shape().hidden == config.shape.hidden &&
                 experts.shape().intermediate == config.shape.intermediate,
             "layer: expert bank shape {}x{} differs from the layer's {}x{}",
             experts.shape().hidden, experts.shape().intermediate, config.shape.hidden,
             config.shape.intermediate);
  s.policy = make_policy(config.policy, topo);

  const int64_t routes = s.num_routes();
  const int home = topo.experts_per_rank();
  for (int r = 0; r < topo.num_ranks; ++r) {
    if (topo.num_slots > 0) s.helpers.emplace_back(config.shape, topo.num_slots);
    s.mlps.emplace_back(config.shape, topo.slots_per_rank(), routes);
    std::vector<SlotWeights> weights;
    weights.reserve(static_cast<size_t>(home) + topo.num_slots);
    for (int l = 0; l < home; ++l) weights.push_back(experts.slot(topo.first_home_expert(r) + l));
    for (int h = 0; h < topo.num_slots; ++h) weights.push_back(s.helpers[r].slot(h));
    s.mlps[r].set_weights(weights, nullptr);
  }
  const size_t row_bytes = static_cast<size_t>(config.shape.hidden) * 2;
  s.x_perm = DeviceBuffer(routes * row_bytes);
  s.y_perm = DeviceBuffer(routes * row_bytes);
  s.gather_map = DeviceBuffer(routes * sizeof(int32_t));
  s.route_row = DeviceBuffer(routes * sizeof(int32_t));
  s.route_weight = DeviceBuffer(routes * sizeof(float));
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
}

LogicalEpLayer::~LogicalEpLayer() = default;
LogicalEpLayer::LogicalEpLayer(LogicalEpLayer&&) noexcept = default;
LogicalEpLayer& LogicalEpLayer::operator=(LogicalEpLayer&&) noexcept = default;

const LayerConfig& LogicalEpLayer::config() const {
  return impl_->config;
}

LayerInvocationStats LogicalEpLayer::forward(const void* input, std::span<const int32_t> topk_ids,
                                             std::span<const float> topk_weights, bool balance,
                                             void* output, Stream stream) {
  Impl& s = *impl_;
  const Topology& topo = s.config.topo;
  const int num_ranks = topo.num_ranks;
  const int tau = s.config.tokens_per_rank;
  const int top_k = s.config.top_k;
  const int per_rank = topo.slots_per_rank();
  const int64_t routes = s.num_routes();
  ISER_CHECK(static_cast<int64_t>(topk_ids.size()) == routes,
             "layer: topk_ids has {} entries, expected P*tau*k = {}", topk_ids.size(), routes);
  ISER_CHECK(static_cast<int64_t>(topk_weights.size()) == routes,
             "layer: topk_weights has {} entries, expected {}", topk_weights.size(), routes);

  // Counts and plan (every rank would compute the same plan from the all-gathered counts).
  LayerInvocationStats stats;
  const CountMatrix counts =
      CountMatrix::from_topk(topk_ids, num_ranks, tau, top_k, topo.num_experts);
  stats.plan = balance ? s.policy->plan(counts).plan : make_empty_plan(topo, counts);
  if (balance) check_plan(topo, counts, stats.plan, s.policy->validation());

  // Replication: byte copies into every group member's helper slot.
  for (const Broadcast& b : stats.plan.broadcasts) {
    for (int m = b.group_begin; m < b.group_begin + b.group_size; ++m) {
      s.helpers[m].copy_slot_from(b.helper, *s.experts, b.expert, stream);
      if (m != b.owner) ++stats.remote_copies;
    }
  }

  // Rewrite: a global slot per route, then a stable counting sort by slot. Rank d's rows are
  // contiguous (global slot = d * (H + S) + local); within a slot, routes keep (source rank,
  // token, j) order.
  std::vector<int32_t> slot_ids(routes);
  const int64_t rank_routes = int64_t{tau} * top_k;
  for (int r = 0; r < num_ranks; ++r) {
    rewrite_tokens(topo, counts, stats.plan, r, topk_ids.subspan(r * rank_routes, rank_routes),
                   top_k, std::span<int32_t>(slot_ids).subspan(r * rank_routes, rank_routes));
  }
  std::vector<int64_t> slot_begin(static_cast<size_t>(topo.total_slots()) + 1, 0);
  for (int32_t slot : slot_ids) {
    if (slot >= 0) ++slot_begin[slot + 1];
  }
  std::vector<int32_t> rows_per_slot(topo.total_slots());
  for (int g = 0; g < topo.total_slots(); ++g) {
    rows_per_slot[g] = static_cast<int32_t>(slot_begin[g + 1]);
    slot_begin[g + 1] += slot_begin[g];
  }
  std::vector<int32_t> gather(slot_begin.back()), route_row(routes, -1);
  std::vector<int64_t> cursor(slot_begin.begin(), slot_begin.end() - 1);
  for (int64_t i = 0; i < routes; ++i) {
    if (slot_ids[i] < 0) continue;
    const int64_t row = cursor[slot_ids[i]]++;
    route_row[i] = static_cast<int32_t>(row);
    gather[row] = static_cast<int32_t>(i / top_k);
  }

  // Dispatch, expert compute per rank, combine.
  ISER_CUDA_CHECK(cudaMemcpyAsync(s.gather_map.get(), gather.data(), gather.size() * 4,
                                  cudaMemcpyHostToDevice, stream));
  ISER_CUDA_CHECK(cudaMemcpyAsync(s.route_row.get(), route_row.data(), route_row.size() * 4,
                                  cudaMemcpyHostToDevice, stream));
  ISER_CUDA_CHECK(cudaMemcpyAsync(s.route_weight.get(), topk_weights.data(),
                                  topk_weights.size() * 4, cudaMemcpyHostToDevice, stream));
  const int hidden = s.config.shape.hidden;
  cuda::launch_gather_rows(
      {static_cast<const uint16_t*>(input), s.x_perm.get<uint16_t>(), s.gather_map.get<int32_t>(),
       static_cast<int64_t>(gather.size()), hidden},
      stream);
  const int home = topo.experts_per_rank();
  stats.rank_loads.assign(num_ranks, 0);
  for (int d = 0; d < num_ranks; ++d) {
    const std::span<const int32_t> rows(rows_per_slot.data() + static_cast<ptrdiff_t>(d) * per_rank,
                                        per_rank);
    for (int l = 0; l < per_rank; ++l) {
      stats.rank_loads[d] += rows[l];
      if (l >= home) stats.helper_routes += rows[l];
    }
    const int64_t first_row = slot_begin[static_cast<size_t>(d) * per_rank];
    s.mlps[d].run(s.x_perm.get<uint16_t>() + first_row * hidden, rows,
                  s.y_perm.get<uint16_t>() + first_row * hidden, stream);
  }
  cuda::launch_combine(
      {s.y_perm.get<uint16_t>(), s.route_row.get<int32_t>(), s.route_weight.get<float>(), nullptr,
       static_cast<uint16_t*>(output), int64_t{num_ranks} * tau, top_k, hidden},
      stream);
  return stats;
}

}  // namespace iser::moe
