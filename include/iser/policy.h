// Policies plug in behind one interface: one instance per (topology, layer); plan() is called
// once per invocation of that layer, in iteration order, so stateful policies (resident,
// windowed EPLB) keep what they need between calls.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"
#include "iser/validator.h"

namespace iser {

struct PolicyOptions {
  int min_move = 0;  // resident/iser: skip replications that move fewer routes than this
  // eplb-window: past iterations used to plan (0: the default, 8); eplb and eplb-oracle plan
  // once from what prepare() gives them.
  int eplb_window = 0;
  // eplb-window: invocations between re-plans (0: the default, 1 = before every invocation).
  int eplb_interval = 0;
  // eplb-equal-mem: helper slots per rank of its static placement (0: a permutation only).
  int eplb_equal_mem_slots = 0;
};

struct PolicyResult {
  Plan plan;                     // broadcasts; loads are the computed loads per rank
  std::vector<RouteFlow> flows;  // where every route runs (empty when !has_flows)
  bool has_flows = true;         // false for policies with no route placement (oracle)
  // Bundles kept resident from the previous invocation (moved no bytes).
  int32_t resident_broadcasts = 0;
  // Static placements: expert copies installed before this invocation (a re-plan), i.e. the
  // (rank, expert) pairs of the new placement its previous one lacked.
  int32_t installed_copies = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Invariants its plans must hold (for iser replay --validate and the tests).
  virtual ValidationOptions validation() const { return {}; }
  // Static policies receive the load history they plan from before the first plan() (called
  // once; replay passes the past: another trace or the warm-up iterations, or, for eplb-oracle,
  // the served iterations themselves).
  virtual void prepare(std::span<const CountMatrix> layer_iterations) {}
  virtual PolicyResult plan(const CountMatrix& counts) = 0;
};

// Names accepted by make_policy, in report order.
std::vector<std::string> available_policies();
// Throws iser::Error naming the policy when unknown.
std::unique_ptr<Policy> make_policy(std::string_view name, const Topology& topo,
                                    const PolicyOptions& options = {});

// Routes flow to their expert's owner (no balancing).
std::vector<RouteFlow> home_flows(const Topology& topo, const CountMatrix& counts);

}  // namespace iser
