// Static placements by DeepSeek's EPLB (include/iser/eplb.h): `eplb`, `eplb-oracle`,
// `eplb-equal-mem` and `eplb-window`.
//
// Definition (all):
//  * EPLB runs on one layer with replicas = P*(H + S'), groups = 1, nodes = 1 (the global
//    policy), gpus = P; rank r holds physical experts [r*(H+S'), (r+1)*(H+S')). S' = S for
//    every variant but eplb-equal-mem, which gets PolicyOptions::eplb_equal_mem_slots (the
//    helper slots per layer that per-invocation policies' shared banks would pay for; 0 makes it
//    a pure permutation of the experts). Weights are installed before the invocation, so the
//    plan has no broadcasts; a re-plan reports the expert copies it installs (installed_copies).
//  * `eplb`, `eplb-equal-mem` and `eplb-oracle` plan once from the load history prepare()
//    receives (the sum of its histograms). They differ only in what replay gives them: the past
//    (another trace, or the warm-up iterations) for eplb and eplb-equal-mem, the very iterations
//    it serves for eplb-oracle (in-sample: a bound no deployment reaches).
//  * `eplb-window` re-plans every PolicyOptions::eplb_interval invocations (default 1) from the
//    previous PolicyOptions::eplb_window invocations only (default 8), never the current one;
//    with no history yet it runs unbalanced (every route at its home rank).
//  * Token split (optimistic, even): source rank s sends its c = c[s][e] routes of expert e to
//    e's n replicas, c / n to each; the c % n leftover routes go one per replica, first to the
//    replicas on s itself (replica order), then to the others in replica order starting at
//    replica s % n (so leftovers of different sources land on different replicas).
//  * Loads are those of the flows (plan.loads); validation() turns the validator's
//    home-plus-quota load recomputation off, which does not describe a static placement.
#include <algorithm>
#include <deque>
#include <optional>

#include "iser/eplb.h"
#include "iser/error.h"
#include "iser/metrics.h"
#include "policies/factories.h"

namespace iser {
namespace {

constexpr int kDefaultEplbWindow = 8;

// Hosting rank of every replica of every expert, in replica order.
struct StaticPlacement {
  std::vector<std::vector<int32_t>> hosts;  // [E][replica] -> rank
  std::vector<std::vector<int32_t>> ranks;  // [E]: the distinct hosting ranks, ascending
};

StaticPlacement place(const Topology& topo, int num_slots, std::span<const double> weight) {
  const int slots_per_rank = topo.experts_per_rank() + num_slots;
  EplbConfig config;
  config.num_replicas = topo.num_ranks * slots_per_rank;
  config.num_groups = 1;
  config.num_nodes = 1;
  config.num_gpus = topo.num_ranks;
  const EplbPlacement p = eplb_rebalance(weight, 1, topo.num_experts, config);
  StaticPlacement out;
  out.hosts.resize(topo.num_experts);
  out.ranks.resize(topo.num_experts);
  for (int e = 0; e < topo.num_experts; ++e) {
    for (int x = 0; x < p.log_count(0, e); ++x) {
      out.hosts[e].push_back(p.log_to_phy(0, e, x) / slots_per_rank);
    }
    out.ranks[e] = out.hosts[e];
    std::sort(out.ranks[e].begin(), out.ranks[e].end());
    out.ranks[e].erase(std::unique(out.ranks[e].begin(), out.ranks[e].end()), out.ranks[e].end());
  }
  return out;
}

std::vector<RouteFlow> split_flows(const Topology& topo, const CountMatrix& counts,
                                   const StaticPlacement& placement) {
  const int P = topo.num_ranks;
  std::vector<RouteFlow> flows;
  std::vector<int32_t> to_rank(P, 0);  // zero outside the current (source, expert)
  std::vector<int32_t> leftover_order;
  for (int e = 0; e < topo.num_experts; ++e) {
    const std::vector<int32_t>& hosts = placement.hosts[e];
    const int n = static_cast<int>(hosts.size());
    for (int s = 0; s < P; ++s) {
      const int32_t c = counts.at(s, e);
      if (c == 0) continue;
      for (const int32_t h : hosts) to_rank[h] += c / n;
      leftover_order.clear();
      for (int x = 0; x < n; ++x) {
        if (hosts[x] == s) leftover_order.push_back(x);
      }
      for (int i = 0; i < n; ++i) {
        const int x = (s % n + i) % n;
        if (hosts[x] != s) leftover_order.push_back(x);
      }
      for (int i = 0; i < c % n; ++i) ++to_rank[hosts[leftover_order[i]]];
      for (const int32_t d : placement.ranks[e]) {
        if (to_rank[d] > 0) flows.push_back({s, e, d, to_rank[d]});
        to_rank[d] = 0;
      }
    }
  }
  return flows;
}

// (rank, expert) pairs of `next` that `previous` lacks: the copies installing `next` costs.
// No previous placement: the home layout (rank r holds experts [r*H, (r+1)*H)).
int32_t installed_copies(const Topology& topo, const StaticPlacement* previous,
                         const StaticPlacement& next) {
  int32_t copies = 0;
  for (int e = 0; e < topo.num_experts; ++e) {
    for (const int32_t r : next.ranks[e]) {
      const bool held =
          previous ? std::binary_search(previous->ranks[e].begin(), previous->ranks[e].end(), r)
                   : r == topo.owner_of(e);
      copies += held ? 0 : 1;
    }
  }
  return copies;
}

std::vector<double> histogram_weight(const CountMatrix& counts) {
  const auto hist = counts.histogram();
  return {hist.begin(), hist.end()};
}

enum class EplbKind { kPast, kOracle, kEqualMemory, kWindow };

class EplbPolicy final : public Policy {
 public:
  EplbPolicy(const Topology& topo, EplbKind kind, int num_slots, int window, int interval)
      : topo_(topo), kind_(kind), num_slots_(num_slots), window_(window), interval_(interval) {}

  std::string_view name() const override {
    switch (kind_) {
      case EplbKind::kPast:
        return "eplb";
      case EplbKind::kOracle:
        return "eplb-oracle";
      case EplbKind::kEqualMemory:
        return "eplb-equal-mem";
      case EplbKind::kWindow:
        return "eplb-window";
    }
    return "eplb";
  }

  ValidationOptions validation() const override {
    ValidationOptions v;
    v.require_aligned_groups = false;
    v.max_exports_per_owner = 0;
    v.loads_from_quotas = false;
    return v;
  }

  void prepare(std::span<const CountMatrix> history) override {
    if (kind_ == EplbKind::kWindow) return;  // windowed EPLB plans from what it has served
    std::vector<double> weight(topo_.num_experts, 0.0);
    for (const CountMatrix& counts : history) {
      check_shape(counts);
      const auto hist = counts.histogram();
      for (int e = 0; e < topo_.num_experts; ++e) weight[e] += static_cast<double>(hist[e]);
    }
    placement_ = place(topo_, num_slots_, weight);
  }

  PolicyResult plan(const CountMatrix& counts) override {
    check_shape(counts);
    PolicyResult result;
    result.plan = make_empty_plan(topo_, counts);
    if (kind_ != EplbKind::kWindow) {
      ISER_CHECK(placement_.has_value(),
                 "policy {}: prepare() must receive the layer's load history before plan()",
                 name());
    } else if (!history_.empty() && served_ % interval_ == 0) {
      std::vector<double> weight(topo_.num_experts, 0.0);
      for (const auto& past : history_) {
        for (int e = 0; e < topo_.num_experts; ++e) weight[e] += past[e];
      }
      StaticPlacement next = place(topo_, num_slots_, weight);
      result.installed_copies = installed_copies(topo_, placement_ ? &*placement_ : nullptr, next);
      placement_ = std::move(next);
    }
    result.flows = placement_ ? split_flows(topo_, counts, *placement_) : home_flows(topo_, counts);
    if (kind_ == EplbKind::kWindow) {
      ++served_;
      history_.push_back(histogram_weight(counts));
      if (static_cast<int>(history_.size()) > window_) history_.pop_front();
    }
    const auto loads = loads_from_flows(topo_.num_ranks, result.flows);
    result.plan.loads.assign(loads.begin(), loads.end());
    return result;
  }

 private:
  void check_shape(const CountMatrix& counts) const {
    ISER_CHECK(counts.num_ranks() == topo_.num_ranks && counts.num_experts() == topo_.num_experts,
               "policy {}: count matrix {} x {} does not match topology P = {}, E = {}", name(),
               counts.num_ranks(), counts.num_experts(), topo_.num_ranks, topo_.num_experts);
  }

  Topology topo_;
  EplbKind kind_;
  int num_slots_;
  int window_;
  int interval_;
  int64_t served_ = 0;
  std::optional<StaticPlacement> placement_;
  std::deque<std::vector<double>> history_;  // eplb-window: hist of the previous invocations
};

}  // namespace

std::unique_ptr<Policy> make_eplb_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<EplbPolicy>(topo, EplbKind::kPast, topo.num_slots, 0, 1);
}

std::unique_ptr<Policy> make_eplb_oracle_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<EplbPolicy>(topo, EplbKind::kOracle, topo.num_slots, 0, 1);
}

std::unique_ptr<Policy> make_eplb_equal_mem_policy(const Topology& topo,
                                                   const PolicyOptions& options) {
  ISER_CHECK(options.eplb_equal_mem_slots >= 0 && options.eplb_equal_mem_slots <= kMaxSlots,
             "policy eplb-equal-mem: invalid slots {} (need 0..{})", options.eplb_equal_mem_slots,
             kMaxSlots);
  return std::make_unique<EplbPolicy>(topo, EplbKind::kEqualMemory, options.eplb_equal_mem_slots, 0,
                                      1);
}

std::unique_ptr<Policy> make_eplb_window_policy(const Topology& topo,
                                                const PolicyOptions& options) {
  ISER_CHECK(options.eplb_window >= 0, "policy eplb-window: invalid window {} (need >= 0)",
             options.eplb_window);
  ISER_CHECK(options.eplb_interval >= 0, "policy eplb-window: invalid interval {} (need >= 0)",
             options.eplb_interval);
  return std::make_unique<EplbPolicy>(
      topo, EplbKind::kWindow, topo.num_slots,
      options.eplb_window == 0 ? kDefaultEplbWindow : options.eplb_window,
      options.eplb_interval == 0 ? 1 : options.eplb_interval);
}

}  // namespace iser
