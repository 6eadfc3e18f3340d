// DeepSeek's Expert Parallelism Load Balancer (EPLB), reproduced from its published algorithm
// (github.com/deepseek-ai/EPLB): replicate the heaviest logical experts into redundant physical
// experts, then pack the physical experts onto GPUs so that GPU loads are as even as possible.
//
// Three stages, per layer:
//   1. balanced_packing of expert groups onto nodes (each node gets groups/nodes groups);
//   2. replicate_experts within each node: every redundant slot goes to the logical expert with the
//      largest load / replica count;
//   3. balanced_packing of the node's physical experts onto its GPUs (load of a replica =
//      expert load / replica count).
// When num_groups is not a multiple of num_nodes the global policy runs instead: the same three
// stages with one group and one node.
//
// Arithmetic follows the reference exactly: loads are float32 (the reference calls
// `weight.float()`), ties go to the lower index everywhere (stable descending sort, first
// minimum / first maximum). See eplb.cpp for how each tie rule was matched.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace iser {

struct EplbConfig {
  int num_replicas = 0;  // physical experts per layer: >= num_experts, a multiple of num_gpus
  int num_groups = 1;    // expert groups (hierarchical policy: num_experts % num_groups == 0)
  int num_nodes = 1;     // server nodes (hierarchical policy: num_gpus % num_nodes == 0)
  int num_gpus = 1;      // GPUs; GPU g holds physical experts [g*R/G, (g+1)*R/G)
};

// Result for L layers, E logical experts, R physical experts; row-major arrays.
struct EplbPlacement {
  int num_layers = 0;
  int num_experts = 0;            // E (logical)
  int num_replicas = 0;           // R (physical)
  int max_replica_count = 0;      // X = max over layers and experts of logcnt (log2phy's last dim)
  std::vector<int32_t> phy2log;   // [L, R]: logical expert of each physical expert
  std::vector<int32_t> phy_rank;  // [L, R]: replica index of each physical expert (0 = first)
  std::vector<int32_t> log2phy;   // [L, E, X]: physical experts of each logical expert, -1 padded
  std::vector<int32_t> logcnt;    // [L, E]: replicas of each logical expert

  int32_t phy_to_log(int layer_idx, int phy_idx) const {
    return phy2log[static_cast<size_t>(layer_idx) * num_replicas + phy_idx];
  }
  int32_t log_count(int layer_idx, int expert_idx) const {
    return logcnt[static_cast<size_t>(layer_idx) * num_experts + expert_idx];
  }
  int32_t log_to_phy(int layer_idx, int expert_idx, int replica_idx) const {
    return log2phy[(static_cast<size_t>(layer_idx) * num_experts + expert_idx) * max_replica_count +
                   replica_idx];
  }
};

// weight: [num_layers, num_experts] row-major loads, every value finite and >= 0. Throws
// iser::Error naming the offending field and value (shape, divisibility, negative or non-finite
// weight).
EplbPlacement eplb_rebalance(std::span<const double> weight, int num_layers, int num_experts,
                             const EplbConfig& config);

// ---- the stages, one layer at a time (exposed for tests and for callers that need one) ----

struct EplbPacking {
  std::vector<int32_t> pack_index;    // [n]: pack of each item
  std::vector<int32_t> rank_in_pack;  // [n]: position of the item inside its pack
};
// Packs n items into num_packs packs of exactly n / num_packs items each, heaviest item first
// into the lightest pack that still has room. n must be a multiple of num_packs.
EplbPacking eplb_balanced_packing(std::span<const float> weight, int num_packs);

struct EplbReplication {
  std::vector<int32_t> phy2log;   // [num_physical]: the first E are the identity
  std::vector<int32_t> phy_rank;  // [num_physical]
  std::vector<int32_t> logcnt;    // [E]
};
// Adds num_physical - E redundant replicas, each to the logical expert with the largest
// weight / count.
EplbReplication eplb_replicate_experts(std::span<const float> weight, int num_physical);

}  // namespace iser
