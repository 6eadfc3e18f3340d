// Machine-readable replay output: JSON (nested) and CSV (one row per EP x policy x layer).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "iser/replay.h"

namespace iser {
namespace {

// JSON has no NaN/inf; undefined metrics (oracle's send-out) are null.
nlohmann::json number_or_null(double value) {
  return value < 0 ? nlohmann::json(nullptr) : nlohmann::json(value);
}

}  // namespace

std::string replay_to_json(const ReplayResult& result, int indent) {
  const ReplayConfig& c = result.config;
  nlohmann::json config = {
      {"ep", c.ep_degrees},
      {"tokens_per_rank", c.tokens_per_rank},
      {"slots", c.num_slots},
      {"g_min", c.g_min},
      {"lsa_size", c.lsa_size > 0 ? nlohmann::json(c.lsa_size) : nlohmann::json(nullptr)},
      {"policies", result.policies},
      {"layers", result.layer_ids},
      {"iterations", result.iterations_per_ep},
      {"warmup_iterations", result.warmup_iterations},
      {"eplb_interval", c.policy_options.eplb_interval},
      {"eplb_equal_mem_slots", result.equal_mem_slots},
      {"plan_trace",
       c.plan_history ? nlohmann::json(c.plan_history->metadata.source) : nlohmann::json(nullptr)},
      {"dropped_tokens", result.dropped_tokens_per_ep},
      {"validate", c.validate},
      {"min_move", c.policy_options.min_move},
      {"eplb_window", c.policy_options.eplb_window},
  };
  const TraceMetadata& m = result.metadata;
  nlohmann::json trace = {{"model", m.model},
                          {"dataset", m.dataset},
                          {"source", m.source},
                          {"num_experts", m.num_experts},
                          {"top_k", m.top_k},
                          {"num_layers", m.num_layers},
                          {"layer_ids", result.layer_ids}};
  nlohmann::json results = nlohmann::json::array();
  for (const PolicySummary& s : result.results) {
    results.push_back({
        {"ep", s.ep},
        {"policy", s.policy},
        {"invocations", s.invocations},
        {"mean_r_before", s.mean_r_before},
        {"mean_r", s.mean_r},
        {"excess_removed", s.excess_removed},
        {"max_send_out_before", s.max_send_out_before},
        {"max_receive_in_before", s.max_receive_in_before},
        {"max_send_out", number_or_null(s.max_send_out)},
        {"max_receive_in", number_or_null(s.max_receive_in)},
        {"broadcasts", s.broadcasts},
        {"remote_copies", s.remote_copies},
        {"resident_copies", s.resident_copies},
        {"owner_payloads_median", s.owner_payloads_median},
        {"owner_payloads_p99", s.owner_payloads_p99},
        {"owner_payloads_max", s.owner_payloads_max},
        {"owner_outside_fraction", s.owner_outside_fraction},
        {"projected_layer_us_before", number_or_null(s.projected_us_before)},
        {"projected_layer_us", number_or_null(s.projected_us)},
        {"per_layer_mean_r_before", s.per_layer_mean_r_before},
        {"per_layer_mean_r", s.per_layer_mean_r},
        {"per_iteration_mean_r_before", s.per_iteration_mean_r_before},
        {"per_iteration_mean_r", s.per_iteration_mean_r},
        {"installed_copies", s.installed_copies},
        {"extra_memory_bytes", number_or_null(s.extra_memory_bytes)},
        {"moved_bytes_per_invocation", number_or_null(s.moved_bytes_per_invocation)},
    });
  }
  if (const auto& cost = c.cost_model) {
    config["model"] = {{"name", cost->name},
                       {"num_moe_layers", cost->num_moe_layers},
                       {"expert_bytes", cost->expert_bytes},
                       {"banks", cost->banks}};
  }
  if (c.projection) {
    config["projection"] = nlohmann::json::parse(model::layer_time_fit_json(*c.projection));
  }
  const nlohmann::json root = {{"config", config}, {"trace", trace}, {"results", results}};
  return root.dump(indent);
}

std::string replay_to_csv(const ReplayResult& result) {
  std::string out =
      "ep,policy,layer,mean_r_before,mean_r,excess_removed_all_layers,max_send_out,"
      "max_receive_in,remote_copies,owner_payloads_p99\n";
  for (const PolicySummary& s : result.results) {
    for (size_t l = 0; l < result.layers.size(); ++l) {
      out += fmt::format("{},{},{},{:.6f},{:.6f},{:.6f},{:.1f},{:.1f},{:.3f},{:.1f}\n", s.ep,
                         s.policy, result.layer_ids[l], s.per_layer_mean_r_before[l],
                         s.per_layer_mean_r[l], s.excess_removed, s.max_send_out, s.max_receive_in,
                         s.remote_copies, s.owner_payloads_p99);
    }
  }
  return out;
}

}  // namespace iser
