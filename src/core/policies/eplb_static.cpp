// `eplb` and `eplb-window`: a static placement by DeepSeek's EPLB (include/iser/eplb.h) with the
// same P * (H + S) physical slots as the per-invocation policies.
//
// Definition (both):
//  * EPLB runs on one layer with replicas = E + P*S = P*(H + S), groups = 1, nodes = 1 (the
//    global policy), gpus = P; rank r holds physical experts [r*(H+S), (r+1)*(H+S)). The
//    placement is static: weights are installed before the invocation, so the plan has no
//    broadcasts and moves no bytes (its cost is not counted).
//  * `eplb` plans once from the whole trace of the layer (sum of hist over every iteration,
//    given to prepare()). `eplb-window` re-plans before every invocation from the previous
//    PolicyOptions::eplb_window invocations only (default 8), never the current one; the first
//    invocation has no history and runs unbalanced (every route at its home rank).
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

StaticPlacement place(const Topology& topo, std::span<const double> weight) {
  EplbConfig config;
  config.num_replicas = topo.total_slots();
  config.num_groups = 1;
  config.num_nodes = 1;
  config.num_gpus = topo.num_ranks;
  const EplbPlacement p = eplb_rebalance(weight, 1, topo.num_experts, config);
  StaticPlacement out;
  out.hosts.resize(topo.num_experts);
  out.ranks.resize(topo.num_experts);
  for (int e = 0; e < topo.num_experts; ++e) {
    for (int x = 0; x < p.log_count(0, e); ++x) {
      out.hosts[e].push_back(p.log_to_phy(0, e, x) / topo.slots_per_rank());
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

std::vector<double> histogram_weight(const CountMatrix& counts) {
  const auto hist = counts.histogram();
  return {hist.begin(), hist.end()};
}

class EplbPolicy final : public Policy {
 public:
  // window == 0: whole trace (prepare); else the previous `window` invocations.
  EplbPolicy(const Topology& topo, int window) : topo_(topo), window_(window) {}

  std::string_view name() const override { return window_ == 0 ? "eplb" : "eplb-window"; }

  ValidationOptions validation() const override {
    ValidationOptions v;
    v.require_aligned_groups = false;
    v.max_exports_per_owner = 0;
    v.loads_from_quotas = false;
    return v;
  }

  void prepare(std::span<const CountMatrix> layer_iterations) override {
    if (window_ != 0) return;  // windowed EPLB must not see the future
    std::vector<double> weight(topo_.num_experts, 0.0);
    for (const CountMatrix& counts : layer_iterations) {
      check_shape(counts);
      const auto hist = counts.histogram();
      for (int e = 0; e < topo_.num_experts; ++e) weight[e] += static_cast<double>(hist[e]);
    }
    placement_ = place(topo_, weight);
  }

  PolicyResult plan(const CountMatrix& counts) override {
    check_shape(counts);
    PolicyResult result;
    result.plan = make_empty_plan(topo_, counts);
    if (window_ == 0) {
      ISER_CHECK(placement_.has_value(),
                 "policy eplb: prepare() must receive the layer's whole trace before plan()");
      result.flows = split_flows(topo_, counts, *placement_);
    } else if (history_.empty()) {
      result.flows = home_flows(topo_, counts);
    } else {
      std::vector<double> weight(topo_.num_experts, 0.0);
      for (const auto& past : history_) {
        for (int e = 0; e < topo_.num_experts; ++e) weight[e] += past[e];
      }
      result.flows = split_flows(topo_, counts, place(topo_, weight));
    }
    if (window_ != 0) {
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
  int window_;
  std::optional<StaticPlacement> placement_;  // eplb (whole trace)
  std::deque<std::vector<double>> history_;   // eplb-window: hist of the previous invocations
};

}  // namespace

std::unique_ptr<Policy> make_eplb_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<EplbPolicy>(topo, 0);
}

std::unique_ptr<Policy> make_eplb_window_policy(const Topology& topo,
                                                const PolicyOptions& options) {
  ISER_CHECK(options.eplb_window >= 0, "policy eplb-window: invalid window {} (need >= 0)",
             options.eplb_window);
  return std::make_unique<EplbPolicy>(
      topo, options.eplb_window == 0 ? kDefaultEplbWindow : options.eplb_window);
}

}  // namespace iser
