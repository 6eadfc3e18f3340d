// Reference EP MoE layer (docs/design.md §10), single-process form: P logical EP ranks on one GPU.
// Per invocation: topk ids/weights -> counts -> plan (a named policy; OFF = no helper slots)
// -> route rewrite (local first, docs/design.md §4.5) -> replication (byte copies of the planned
// experts into every group member's helper slot) -> dispatch (tokens gathered into each destination
// rank's slot order) -> grouped gated MLP per rank over its H + S slots -> combine (each token's
// top-k outputs summed in fp32 in the fixed order j = 0..k-1).
//
// ON and OFF outputs are bitwise identical: replicas are byte copies, the expert GEMMs give a
// token the same bytes whatever its slot, row count or position (GemmBackend::kLtPinned), and
// the combine order does not depend on where a route ran.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "iser/moe.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser::moe {

struct LayerConfig {
  Topology topo;  // P logical ranks, E experts, S helper slots per rank
  ExpertShape shape;
  int top_k = 6;
  int tokens_per_rank = 0;        // tau
  std::string policy = "halo-q";  // plan policy when balancing is on
};

struct LayerInvocationStats {
  Plan plan;                        // the plan used (empty when balancing is off)
  std::vector<int64_t> rank_loads;  // routes each rank computed
  int64_t helper_routes = 0;        // routes computed in helper slots
  int64_t remote_copies = 0;        // helper slots written by replication
};

class LogicalEpLayer {
 public:
  // experts: one slot per routed expert (slot e = expert e's home weights), not copied.
  LogicalEpLayer(const LayerConfig& config, const ExpertBank& experts);
  ~LogicalEpLayer();
  LogicalEpLayer(LogicalEpLayer&&) noexcept;
  LogicalEpLayer& operator=(LogicalEpLayer&&) noexcept;

  const LayerConfig& config() const;

  // input, output: [P * tau, He] bf16 device buffers, rank r owning rows [r*tau, (r+1)*tau).
  // topk_ids (-1 = none) / topk_weights: [P * tau * k] host arrays. Blocks until the plan and
  // the routing maps are built; the GPU work is enqueued on `stream`. Throws iser::Error on bad
  // ids, sizes or a plan the policy gets wrong (validated).
  LayerInvocationStats forward(const void* input, std::span<const int32_t> topk_ids,
                               std::span<const float> topk_weights, bool balance, void* output,
                               Stream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace iser::moe
