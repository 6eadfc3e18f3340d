#include "replay_output.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace iser::cli {
namespace {

std::string routes_or_dash(double value) {
  return value < 0 ? std::string("-") : fmt::format("{:.0f}", value);
}

std::string gigabytes_or_dash(double bytes) {
  return bytes < 0 ? std::string("-") : fmt::format("{:.2f}", bytes / 1e9);
}

std::string megabytes_or_dash(double bytes) {
  return bytes < 0 ? std::string("-") : fmt::format("{:.0f}", bytes / 1e6);
}

bool has(const ReplayResult& result, std::string_view policy) {
  return std::find(result.policies.begin(), result.policies.end(), policy) != result.policies.end();
}

}  // namespace

const PolicySummary* find_summary(const ReplayResult& result, int ep, std::string_view policy) {
  for (const PolicySummary& s : result.results) {
    if (s.ep == ep && s.policy == policy) return &s;
  }
  return nullptr;
}

int headline_ep(const ReplayResult& result) {
  const auto& eps = result.config.ep_degrees;
  if (std::find(eps.begin(), eps.end(), 8) != eps.end()) return 8;
  return *std::max_element(eps.begin(), eps.end());
}

std::string static_plan_source(const ReplayResult& result) {
  if (const auto& h = result.config.plan_history) {
    return fmt::format("{}{}", h->metadata.source,
                       h->metadata.dataset.empty() ? "" : " (" + h->metadata.dataset + ")");
  }
  return fmt::format("the {} warm-up iteration(s)", result.warmup_iterations);
}

std::vector<std::string> chart_policies(const ReplayResult& result, const ChartOptions& options) {
  std::vector<std::string> wanted = options.policies;
  if (wanted.empty()) {
    wanted = {"eplb", "eplb-window", has(result, "iser") ? "iser" : "halo-q", "oracle"};
  }
  std::vector<std::string> out;
  for (const auto& p : wanted) {
    if (p != "none" && has(result, p)) out.push_back(p);
  }
  return out;
}

void print_replay_tables(const ReplayResult& result, std::FILE* out) {
  const TraceMetadata& m = result.metadata;
  if (const auto& fit = result.config.projection) {
    fmt::print(
        out, "layer-time projection '{}': t = {} + {} * R us (measured at EP{}, {} tokens/rank)\n",
        fit->name, fit->intercept_us, fit->slope_us, fit->ep, fit->tokens_per_rank);
    fmt::print(out, "  (* marks EP degrees other than the fit's: an extrapolation)\n");
  }
  std::vector<int> routeless_ids;  // layer ids, as --layers takes them
  for (const int l : m.routeless_layers) routeless_ids.push_back(m.layer_id(l));
  fmt::print(out, "iser replay: {} ({}{}E = {}, top-{}, {} layers{})\n", m.source,
             m.model.empty() ? "" : m.model + ", ", m.dataset.empty() ? "" : m.dataset + ", ",
             m.num_experts, m.top_k, result.layers.size(),
             result.config.layers.empty() && !m.routeless_layers.empty()
                 ? fmt::format("; {} without routes left out: {}", m.routeless_layers.size(),
                               fmt::join(routeless_ids, ","))
                 : "");
  if (result.warmup_iterations > 0) {
    fmt::print(out, "{} warm-up iteration(s) per layer served first and left out of every mean\n",
               result.warmup_iterations);
  }
  if (has(result, "eplb") || has(result, "eplb-equal-mem")) {
    fmt::print(out, "eplb{}: static, planned once from {}\n",
               has(result, "eplb-equal-mem")
                   ? fmt::format(" / eplb-equal-mem ({} slot(s) per rank and layer)",
                                 result.equal_mem_slots)
                   : "",
               static_plan_source(result));
  }
  if (has(result, "eplb-oracle")) {
    fmt::print(out, "eplb-oracle: planned on the iterations it serves (in-sample): a bound\n");
  }
  const auto& cost = result.config.cost_model;
  if (cost) {
    fmt::print(out,
               "costs for {}: {} MoE layers, {:.1f} MB per expert, {} shared helper banks; "
               "memory = extra expert weights per GPU; moved = expert bytes copied per layer "
               "invocation\n",
               cost->name, cost->num_moe_layers, cost->expert_bytes / 1e6, cost->banks);
  }
  const bool projected = result.config.projection.has_value();
  for (size_t e = 0; e < result.config.ep_degrees.size(); ++e) {
    const int ep = result.config.ep_degrees[e];
    fmt::print(out, "\nEP{}: H = {}, S = {}, tau = {} tokens/rank, {} iteration(s) x {} layers{}\n",
               ep, m.num_experts / ep, result.config.num_slots, result.config.tokens_per_rank,
               result.iterations_per_ep[e], result.layers.size(),
               result.dropped_tokens_per_ep[e]
                   ? fmt::format(" ({} tail tokens dropped)", result.dropped_tokens_per_ep[e])
                   : "");
    if (!result.results.empty() && result.iterations_per_ep[e] > 1) {
      const PolicySummary* any = find_summary(result, ep, result.policies.front());
      auto sorted = any->per_iteration_mean_r_before;
      std::sort(sorted.begin(), sorted.end());
      fmt::print(out,
                 "  R per iteration without balancing (mean over layers): min {:.3f}, "
                 "median {:.3f}, max {:.3f}\n",
                 sorted.front(), sorted[sorted.size() / 2], sorted.back());
    }
    const std::string cost_head = cost ? fmt::format(" {:>8} {:>8}", "memory", "moved") : "";
    const std::string cost_unit = cost ? fmt::format(" {:>8} {:>8}", "GB/GPU", "MB/inv") : "";
    fmt::print(out, "  {:<18} {:>8} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>8}{}{}\n", "policy",
               "R before", "mean R", "excess", "max send", "max recv", "remote", "payload", "owner",
               cost_head, projected ? "  projected" : "");
    fmt::print(out, "  {:<18} {:>8} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>8}{}{}\n", "", "", "",
               "removed", "out", "in", "copies", "p99", "outside", cost_unit,
               projected ? "   layer us" : "");
    for (const PolicySummary& s : result.results) {
      if (s.ep != ep) continue;
      fmt::print(
          out,
          "  {:<18} {:>8.4f} {:>8.4f} {:>8.1f}% {:>10} {:>10} {:>8.1f} {:>8.0f} {:>7.1f}%{}{}\n",
          s.policy, s.mean_r_before, s.mean_r, 100.0 * s.excess_removed,
          routes_or_dash(s.max_send_out), routes_or_dash(s.max_receive_in), s.remote_copies,
          s.owner_payloads_p99, 100.0 * s.owner_outside_fraction,
          cost ? fmt::format(" {:>8} {:>8}", gigabytes_or_dash(s.extra_memory_bytes),
                             megabytes_or_dash(s.moved_bytes_per_invocation))
               : "",
          projected
              ? fmt::format(" {:>10.1f}{}", s.projected_us,
                            result.config.projection->ep > 0 && result.config.projection->ep != ep
                                ? "*"
                                : "")
              : "");
    }
  }
  if (const std::string line = replay_summary_line(result); !line.empty()) {
    fmt::print(out, "\n{}\n", line);
  }
}

std::string replay_summary_line(const ReplayResult& result) {
  const int ep = headline_ep(result);
  const PolicySummary* dynamic = find_summary(result, ep, "iser");
  if (!dynamic) dynamic = find_summary(result, ep, "halo-q");
  const PolicySummary* fixed = find_summary(result, ep, "eplb");
  if (!dynamic || !fixed) return {};
  const PolicySummary* window = find_summary(result, ep, "eplb-window");
  std::string line = fmt::format(
      "Summary (EP{}, S = {}, {}): per-invocation {} R {:.3f} vs static EPLB planned from the "
      "past {:.3f}{} (no balancing {:.3f})",
      ep, result.config.num_slots,
      result.metadata.dataset.empty() ? result.metadata.source : result.metadata.dataset,
      dynamic->policy, dynamic->mean_r, fixed->mean_r,
      window ? fmt::format(", re-planned every {} iteration(s) {:.3f}",
                           std::max(result.config.policy_options.eplb_interval, 1), window->mean_r)
             : "",
      dynamic->mean_r_before);
  if (const auto& cost = result.config.cost_model) {
    line += fmt::format(
        "; on {} {} holds {:.2f} GB of extra experts per GPU and moves {:.0f} MB per layer "
        "invocation, static EPLB {:.2f} GB",
        cost->name, dynamic->policy, dynamic->extra_memory_bytes / 1e9,
        dynamic->moved_bytes_per_invocation / 1e6, fixed->extra_memory_bytes / 1e9);
    if (const PolicySummary* eq = find_summary(result, ep, "eplb-equal-mem")) {
      line += fmt::format(" (at {}'s memory: R {:.3f})", dynamic->policy, eq->mean_r);
    }
  }
  return line + ".";
}

}  // namespace iser::cli
