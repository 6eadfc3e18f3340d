// Replay (the main job, docs/design.md §1.1): run policies over routing data, per EP degree, layer
// and iteration, and aggregate the metrics of docs/design.md §7.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "iser/model.h"
#include "iser/policy.h"
#include "iser/trace.h"

namespace iser {

inline constexpr int64_t kDefaultSampledIterations = 2;

struct ReplayConfig {
  std::vector<int> ep_degrees{4, 8, 16, 24};
  int tokens_per_rank = 8192;
  int num_slots = 4;
  int g_min = kDefaultGMin;
  std::vector<std::string> policies;  // empty: every available policy
  std::vector<int> layers;            // empty: every layer
  // Iterations per layer: token traces default to every full iteration, sampled sources to
  // kDefaultSampledIterations.
  std::optional<int64_t> iterations;
  bool validate = false;  // check every plan against its policy's invariants
  PolicyOptions policy_options;
  // Layer-time projection (--project-hw): t = intercept + slope * R per invocation.
  std::optional<model::LayerTimeFit> projection;
  int num_threads = 0;  // 0: hardware concurrency
  // Called from worker threads with (tasks done, tasks total); must be thread-safe.
  std::function<void(int64_t, int64_t)> progress;
};

// Aggregates of one (EP degree, policy) over every (layer, iteration) invocation.
struct PolicySummary {
  int ep = 0;
  std::string policy;
  int64_t invocations = 0;
  double mean_r_before = 1.0;
  double mean_r = 1.0;
  double excess_removed = 0.0;  // (mean R_off - mean R_on) / (mean R_off - 1)
  bool has_flows = true;        // false: send-out/receive-in undefined (oracle)
  // Means over invocations of the per-invocation maxima (routes).
  double max_send_out_before = 0.0;
  double max_receive_in_before = 0.0;
  double max_send_out = 0.0;
  double max_receive_in = 0.0;
  double broadcasts = 0.0;       // per invocation
  double remote_copies = 0.0;    // per invocation (moved bundles only)
  double resident_copies = 0.0;  // per invocation: copies avoided by residency
  // Broadcasts/copies sourced by the busiest owner per invocation.
  double owner_payloads_median = 0.0;
  double owner_payloads_p99 = 0.0;
  int32_t owner_payloads_max = 0;
  double owner_outside_fraction = 0.0;  // of broadcasts whose group excludes the owner
  // Mean projected layer time (us) before and after balancing; -1 without a projection.
  double projected_us_before = -1.0;
  double projected_us = -1.0;
  std::vector<double> per_layer_mean_r_before;  // indexed like ReplayResult::layers
  std::vector<double> per_layer_mean_r;
};

struct ReplayResult {
  ReplayConfig config;
  TraceMetadata metadata;
  std::vector<int> layers;
  std::vector<std::string> policies;
  std::vector<int64_t> iterations_per_ep;  // parallel to config.ep_degrees
  std::vector<int64_t> dropped_tokens_per_ep;
  std::vector<PolicySummary> results;  // ep-major, then policy order
};

// Throws iser::Error on invalid configuration (unknown policy, bad EP degree for E, a trace
// too short for one iteration) or, with validate, on the first invalid plan.
ReplayResult run_replay(const RoutingSource& source, const ReplayConfig& config);

// {"config": {...}, "trace": {...}, "results": [{"ep", "policy", "mean_r", ...}]}.
std::string replay_to_json(const ReplayResult& result, int indent = 2);
// One row per (ep, policy, layer).
std::string replay_to_csv(const ReplayResult& result);

}  // namespace iser
