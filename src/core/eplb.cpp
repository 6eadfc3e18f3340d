// EPLB (DeepSeek's Expert Parallelism Load Balancer), written from its published description.
//
// How the reference's tie rules are matched (and why the README example comes out identical):
//  * balanced_packing sorts items by `weight.float().sort(descending=True)`. On the CPU that sort
//    keeps equal keys in index order, so we use a stable descending sort (ties: lower index
//    first). The README example depends on it: in layer 0, node 0 replicates expert 5 into
//    physical experts 2 and 6 (82.5 tokens each) and expert 4 into 1 and 7 (52 each); a stable
//    sort packs 2 before 6 and 1 before 7, which yields phy2log [5, 6, 5, 7, ...]. (Swapping equal
//    replicas of one expert would leave phy2log unchanged but permute log2phy, so we pin it.)
//  * The pack for each item is Python's `min(open packs, key=pack weight)`, which returns the
//    first minimum: ties go to the lower pack index.
//  * replicate_experts takes `(weight / logcnt).max(dim=-1).indices`, the first maximum: ties go
//    to the lower logical index. We keep a max-heap ordered by (load per replica desc, index asc),
//    which pops exactly that element; only the popped expert's key changes per step.
//  * Loads are float32 as in the reference (`weight.float()`): replica loads are float32 divisions
//    and pack weights float32 sums accumulated in assignment order, so float rounding (weights
//    above 2^24) resolves the same way as in the reference. The one place we cannot follow the
//    reference bit for bit is the group sum of stage 1 (torch's vectorised float32 reduction):
//    we sum in double and round once, which equals torch whenever its sum is exact (all integer
//    group loads below 2^24).
#include "iser/eplb.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>

#include "iser/error.h"

namespace iser {
namespace {

// Largest log2phy we agree to materialise (entries); beyond it the placement is unusable anyway.
constexpr int64_t kMaxLog2PhyEntries = int64_t{1} << 28;
constexpr int kMaxReplicas = 1 << 20;

std::vector<int32_t> inverse_permutation(std::span<const int32_t> perm) {
  std::vector<int32_t> inv(perm.size(), -1);
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int32_t>(i);
  return inv;
}

struct LayerShape {
  int num_experts;
  int num_replicas;
  int num_groups;
  int num_nodes;
  int num_gpus;
};

// One layer of rebalance_experts_hierarchical. Writes phy2log/phy_rank ([R]) and logcnt ([E]).
void rebalance_layer(std::span<const float> weight, const LayerShape& s, std::span<int32_t> phy2log,
                     std::span<int32_t> phy_rank, std::span<int32_t> logcnt) {
  const int group_size = s.num_experts / s.num_groups;
  const int groups_per_node = s.num_groups / s.num_nodes;
  const int experts_per_node = s.num_experts / s.num_nodes;    // logical
  const int replicas_per_node = s.num_replicas / s.num_nodes;  // physical
  const int gpus_per_node = s.num_gpus / s.num_nodes;
  const int replicas_per_gpu = s.num_replicas / s.num_gpus;

  // Stage 1: pack groups onto nodes. "mlog" numbers logical experts node-major: node n holds
  // mlog [n * E/N, (n+1) * E/N), its groups in pack order, each group's experts in order.
  std::vector<float> group_weight(s.num_groups);
  for (int g = 0; g < s.num_groups; ++g) {
    double sum = 0.0;
    for (int i = 0; i < group_size; ++i) sum += weight[g * group_size + i];
    group_weight[g] = static_cast<float>(sum);
  }
  const EplbPacking group_packing = eplb_balanced_packing(group_weight, s.num_nodes);
  std::vector<int32_t> log2mlog(s.num_experts);
  for (int e = 0; e < s.num_experts; ++e) {
    const int g = e / group_size;
    log2mlog[e] = (group_packing.pack_index[g] * groups_per_node + group_packing.rank_in_pack[g]) *
                      group_size +
                  e % group_size;
  }
  const std::vector<int32_t> mlog2log = inverse_permutation(log2mlog);

  std::vector<int32_t> mlogcnt(s.num_experts);
  std::vector<float> node_weight(experts_per_node);
  std::vector<float> replica_weight(replicas_per_node);
  std::vector<int32_t> phy2pphy(replicas_per_node);
  for (int n = 0; n < s.num_nodes; ++n) {
    const int mlog_base = n * experts_per_node;
    for (int j = 0; j < experts_per_node; ++j) node_weight[j] = weight[mlog2log[mlog_base + j]];

    // Stage 2: replicate within the node.
    const EplbReplication rep = eplb_replicate_experts(node_weight, replicas_per_node);
    std::copy(rep.logcnt.begin(), rep.logcnt.end(), mlogcnt.begin() + mlog_base);

    // Stage 3: pack the node's physical experts onto its GPUs by load per replica.
    for (int p = 0; p < replicas_per_node; ++p) {
      const int j = rep.phy2log[p];
      replica_weight[p] = node_weight[j] / static_cast<float>(rep.logcnt[j]);
    }
    const EplbPacking gpu_packing = eplb_balanced_packing(replica_weight, gpus_per_node);
    for (int p = 0; p < replicas_per_node; ++p) {
      phy2pphy[p] = gpu_packing.pack_index[p] * replicas_per_gpu + gpu_packing.rank_in_pack[p];
    }
    const std::vector<int32_t> pphy2phy = inverse_permutation(phy2pphy);
    for (int q = 0; q < replicas_per_node; ++q) {
      const int p = pphy2phy[q];
      phy2log[n * replicas_per_node + q] = mlog2log[mlog_base + rep.phy2log[p]];
      phy_rank[n * replicas_per_node + q] = rep.phy_rank[p];
    }
  }
  for (int e = 0; e < s.num_experts; ++e) logcnt[e] = mlogcnt[log2mlog[e]];
}

}  // namespace

EplbPacking eplb_balanced_packing(std::span<const float> weight, int num_packs) {
  const int n = static_cast<int>(weight.size());
  ISER_CHECK(num_packs >= 1, "EPLB packing: invalid number of packs {}", num_packs);
  ISER_CHECK(n % num_packs == 0, "EPLB packing: {} items cannot fill {} packs evenly", n,
             num_packs);
  const int items_per_pack = n / num_packs;
  EplbPacking packing;
  packing.pack_index.assign(n, -1);
  packing.rank_in_pack.assign(n, -1);
  // NOTE: the reference short-cuts one item per pack to the identity (item i -> pack i), which is
  // not what the greedy below would produce (it would follow the sorted order).
  if (items_per_pack == 1) {
    std::iota(packing.pack_index.begin(), packing.pack_index.end(), 0);
    std::fill(packing.rank_in_pack.begin(), packing.rank_in_pack.end(), 0);
    return packing;
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return weight[a] > weight[b]; });
  std::vector<float> pack_weight(num_packs, 0.0f);
  std::vector<int32_t> pack_items(num_packs, 0);
  for (const int32_t item : order) {
    int best = -1;
    for (int p = 0; p < num_packs; ++p) {
      if (pack_items[p] == items_per_pack) continue;
      if (best < 0 || pack_weight[p] < pack_weight[best]) best = p;  // first minimum
    }
    packing.pack_index[item] = best;
    packing.rank_in_pack[item] = pack_items[best];
    pack_weight[best] += weight[item];
    ++pack_items[best];
  }
  return packing;
}

EplbReplication eplb_replicate_experts(std::span<const float> weight, int num_physical) {
  const int num_logical = static_cast<int>(weight.size());
  ISER_CHECK(num_physical >= num_logical,
             "EPLB replication: {} physical experts cannot hold {} logical experts", num_physical,
             num_logical);
  EplbReplication rep;
  rep.phy2log.resize(num_physical);
  std::iota(rep.phy2log.begin(), rep.phy2log.begin() + num_logical, 0);
  rep.phy_rank.assign(num_physical, 0);
  rep.logcnt.assign(num_logical, 1);

  struct Key {
    float load;  // weight / logcnt, float32 as in the reference
    int32_t expert;
  };
  // Heap top = the largest load, lowest expert among equal loads (the first maximum).
  const auto lower_priority = [](const Key& a, const Key& b) {
    return a.load < b.load || (a.load == b.load && a.expert > b.expert);
  };
  std::priority_queue<Key, std::vector<Key>, decltype(lower_priority)> heap(lower_priority);
  for (int e = 0; e < num_logical; ++e) heap.push({weight[e], e});
  for (int p = num_logical; p < num_physical; ++p) {
    const int32_t e = heap.top().expert;
    heap.pop();
    rep.phy2log[p] = e;
    rep.phy_rank[p] = rep.logcnt[e];
    ++rep.logcnt[e];
    heap.push({weight[e] / static_cast<float>(rep.logcnt[e]), e});
  }
  return rep;
}

EplbPlacement eplb_rebalance(std::span<const double> weight, int num_layers, int num_experts,
                             const EplbConfig& config) {
  ISER_CHECK(num_layers >= 1, "EPLB: invalid number of layers {}", num_layers);
  ISER_CHECK(num_experts >= 1, "EPLB: invalid number of experts {}", num_experts);
  ISER_CHECK(weight.size() == static_cast<size_t>(num_layers) * num_experts,
             "EPLB: weight has {} values, expected layers x experts = {} x {}", weight.size(),
             num_layers, num_experts);
  ISER_CHECK(config.num_gpus >= 1, "EPLB: invalid gpus = {}: need gpus >= 1", config.num_gpus);
  ISER_CHECK(config.num_nodes >= 1, "EPLB: invalid nodes = {}: need nodes >= 1", config.num_nodes);
  ISER_CHECK(config.num_groups >= 1, "EPLB: invalid groups = {}: need groups >= 1",
             config.num_groups);
  ISER_CHECK(config.num_replicas >= num_experts && config.num_replicas <= kMaxReplicas,
             "EPLB: invalid replicas = {}: need experts ({}) <= replicas <= {}",
             config.num_replicas, num_experts, kMaxReplicas);
  ISER_CHECK(config.num_replicas % config.num_gpus == 0,
             "EPLB: replicas = {} is not a multiple of gpus = {}", config.num_replicas,
             config.num_gpus);

  // The reference's choice of policy: hierarchical when groups split evenly over nodes, global
  // (one group, one node) otherwise. Its divisibility asserts only apply to the chosen path.
  LayerShape shape{num_experts, config.num_replicas, config.num_groups, config.num_nodes,
                   config.num_gpus};
  if (config.num_groups % config.num_nodes == 0) {
    ISER_CHECK(num_experts % config.num_groups == 0,
               "EPLB: experts = {} is not a multiple of groups = {}", num_experts,
               config.num_groups);
    ISER_CHECK(config.num_gpus % config.num_nodes == 0,
               "EPLB: gpus = {} is not a multiple of nodes = {}", config.num_gpus,
               config.num_nodes);
  } else {
    shape.num_groups = 1;
    shape.num_nodes = 1;
  }

  std::vector<float> weight32(weight.size());
  for (size_t i = 0; i < weight.size(); ++i) {
    const double w = weight[i];
    ISER_CHECK(std::isfinite(w) && w >= 0.0 && w <= std::numeric_limits<float>::max(),
               "EPLB: weight[{}][{}] = {} is not a finite non-negative float32 load",
               i / num_experts, i % num_experts, w);
    weight32[i] = static_cast<float>(w);
  }

  EplbPlacement out;
  out.num_layers = num_layers;
  out.num_experts = num_experts;
  out.num_replicas = config.num_replicas;
  const size_t num_phy = static_cast<size_t>(num_layers) * config.num_replicas;
  out.phy2log.assign(num_phy, -1);
  out.phy_rank.assign(num_phy, -1);
  out.logcnt.assign(static_cast<size_t>(num_layers) * num_experts, 0);
  for (int l = 0; l < num_layers; ++l) {
    const size_t phy_base = static_cast<size_t>(l) * config.num_replicas;
    const size_t log_base = static_cast<size_t>(l) * num_experts;
    rebalance_layer({weight32.data() + log_base, static_cast<size_t>(num_experts)}, shape,
                    {out.phy2log.data() + phy_base, static_cast<size_t>(config.num_replicas)},
                    {out.phy_rank.data() + phy_base, static_cast<size_t>(config.num_replicas)},
                    {out.logcnt.data() + log_base, static_cast<size_t>(num_experts)});
  }

  out.max_replica_count = *std::max_element(out.logcnt.begin(), out.logcnt.end());
  const int64_t log2phy_entries =
      static_cast<int64_t>(num_layers) * num_experts * out.max_replica_count;
  ISER_CHECK(log2phy_entries <= kMaxLog2PhyEntries,
             "EPLB: log2phy would hold {} entries (layers {} x experts {} x max replicas {}), "
             "more than {}",
             log2phy_entries, num_layers, num_experts, out.max_replica_count, kMaxLog2PhyEntries);
  out.log2phy.assign(static_cast<size_t>(log2phy_entries), -1);
  for (int l = 0; l < num_layers; ++l) {
    for (int p = 0; p < config.num_replicas; ++p) {
      const size_t idx = static_cast<size_t>(l) * config.num_replicas + p;
      const size_t slot =
          (static_cast<size_t>(l) * num_experts + out.phy2log[idx]) * out.max_replica_count +
          out.phy_rank[idx];
      out.log2phy[slot] = p;
    }
  }
  return out;
}

}  // namespace iser
