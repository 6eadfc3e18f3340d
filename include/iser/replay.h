// Replay (the main job, docs/design.md §1.1): run policies over routing data, per EP degree, layer
// and iteration, and aggregate the metrics of docs/design.md §7.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "iser/model.h"
#include "iser/policy.h"
#include "iser/trace.h"

namespace iser {

inline constexpr int64_t kDefaultSampledIterations = 2;

// The load history a static placement plans from when it comes from another recording
// (`--plan-trace`): the whole-set histogram of every layer of that file, with the layer ids
// the file carries, matched to the served layers by id.
struct PlanHistory {
  TraceMetadata metadata;
  std::vector<std::vector<int64_t>> histograms;  // [layer index][E]
};
// Whole-set histograms of any routing data: a histogram category as is (options.category, or
// the only/first one), tokens and per-iteration counts summed over the whole file.
PlanHistory plan_history_from(const TraceData& data, const TraceOptions& options = {});
PlanHistory read_plan_history(const std::filesystem::path& path, const TraceOptions& options = {});

// What a policy's extra expert slots cost on a named model (`--model`): per-layer static slots
// (EPLB: S slots in every MoE layer) against banks shared by all layers (per-invocation
// replication: S slots x banks, whatever the number of layers).
struct ReplayCostModel {
  std::string name;
  int num_moe_layers = 0;
  double expert_bytes = 0;  // W: one routed expert's weights and scales
  int banks = 2;            // helper banks shared by all layers (layer l uses bank l mod banks)
  std::string source;
};
// deepseek-v4-flash, deepseek-v4-pro (case-insensitive); throws naming the known ones.
const ReplayCostModel& find_replay_cost_model(std::string_view name);
std::vector<std::string> replay_cost_model_names();

// Policies `iser replay` runs when none are named: the comparison the main job reports.
std::vector<std::string> default_replay_policies();

struct ReplayConfig {
  std::vector<int> ep_degrees{4, 8, 16, 24};
  int tokens_per_rank = 8192;
  int num_slots = 4;
  int g_min = kDefaultGMin;
  // LSA team size (Topology::lsa_size); 0: one team per EP degree. Must divide every EP degree.
  int lsa_size = 0;
  std::vector<std::string> policies;  // empty: every available policy
  std::vector<int> layers;            // empty: every layer
  // Measured iterations per layer (after the warm-up): token traces default to every full
  // iteration left, sampled sources to kDefaultSampledIterations.
  std::optional<int64_t> iterations;
  // Iterations served first and left out of every mean (policies still see them: windowed
  // and resident state warms up, and `eplb` without a plan history plans from them). Default:
  // the EPLB window when a policy plans from the served past (eplb-window, or eplb /
  // eplb-equal-mem without plan_history), else 0.
  std::optional<int64_t> warmup;
  // Another recording for eplb / eplb-equal-mem to plan from (layers matched by id).
  std::optional<PlanHistory> plan_history;
  // Memory and traffic columns; none without a model.
  std::optional<ReplayCostModel> cost_model;
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
  // Mean over layers per measured iteration (index j is iteration warmup + j).
  std::vector<double> per_iteration_mean_r_before;
  std::vector<double> per_iteration_mean_r;
  double installed_copies = 0.0;  // per invocation: static re-plans' expert copies
  // With a cost model (else -1): extra expert memory per GPU (bytes) over the whole model, and
  // expert bytes moved per layer invocation (copies x W; static re-plans amortised over their
  // interval; a resident replica counts as moved, since shared banks hold other layers'
  // replicas in between).
  double extra_memory_bytes = -1.0;
  double moved_bytes_per_invocation = -1.0;
};

struct ReplayResult {
  ReplayConfig config;
  TraceMetadata metadata;
  std::vector<int> layers;     // layer indices into the source
  std::vector<int> layer_ids;  // the model's layer id of each (what tables and files show)
  std::vector<std::string> policies;
  int64_t warmup_iterations = 0;           // per (EP, layer), excluded from every mean
  int equal_mem_slots = 0;                 // eplb-equal-mem's slots per rank and layer
  std::vector<int64_t> iterations_per_ep;  // measured, parallel to config.ep_degrees
  std::vector<int64_t> dropped_tokens_per_ep;
  std::vector<PolicySummary> results;  // ep-major, then policy order
};

// Policies that place experts statically from a load history (EPLB variants).
bool is_static_policy(std::string_view policy);

// Throws iser::Error on invalid configuration (unknown policy, bad EP degree for E, a trace
// too short for one iteration, a plan history without a served layer) or, with validate, on
// the first invalid plan.
ReplayResult run_replay(const RoutingSource& source, const ReplayConfig& config);

// {"config": {...}, "trace": {...}, "results": [{"ep", "policy", "mean_r", ...}]}.
std::string replay_to_json(const ReplayResult& result, int indent = 2);
// One row per (ep, policy, layer).
std::string replay_to_csv(const ReplayResult& result);

}  // namespace iser
