#include "replay_output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace iser::cli {
namespace {

std::string routes_or_dash(double value) {
  return value < 0 ? std::string("-") : fmt::format("{:.0f}", value);
}

}  // namespace

void print_replay_tables(const ReplayResult& result, std::FILE* out) {
  const TraceMetadata& m = result.metadata;
  if (const auto& fit = result.config.projection) {
    fmt::print(
        out, "layer-time projection '{}': t = {} + {} * R us (measured at EP{}, {} tokens/rank)\n",
        fit->name, fit->intercept_us, fit->slope_us, fit->ep, fit->tokens_per_rank);
    fmt::print(out, "  (* marks EP degrees other than the fit's: an extrapolation)\n");
  }
  fmt::print(out, "iser replay: {} ({}{}E = {}, top-{}, {} layers{})\n", m.source,
             m.model.empty() ? "" : m.model + ", ", m.dataset.empty() ? "" : m.dataset + ", ",
             m.num_experts, m.top_k, result.layers.size(),
             result.config.layers.empty() && !m.routeless_layers.empty()
                 ? fmt::format("; {} without routes left out: {}", m.routeless_layers.size(),
                               fmt::join(m.routeless_layers, ","))
                 : "");
  for (size_t e = 0; e < result.config.ep_degrees.size(); ++e) {
    const int ep = result.config.ep_degrees[e];
    fmt::print(out, "\nEP{}: H = {}, S = {}, tau = {} tokens/rank, {} iteration(s) x {} layers{}\n",
               ep, m.num_experts / ep, result.config.num_slots, result.config.tokens_per_rank,
               result.iterations_per_ep[e], result.layers.size(),
               result.dropped_tokens_per_ep[e]
                   ? fmt::format(" ({} tail tokens dropped)", result.dropped_tokens_per_ep[e])
                   : "");
    const bool projected = result.config.projection.has_value();
    fmt::print(out, "  {:<18} {:>8} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>8}{}\n", "policy",
               "R before", "mean R", "excess", "max send", "max recv", "remote", "payload", "owner",
               projected ? "  projected" : "");
    fmt::print(out, "  {:<18} {:>8} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>8}{}\n", "", "", "",
               "removed", "out", "in", "copies", "p99", "outside", projected ? "   layer us" : "");
    for (const PolicySummary& s : result.results) {
      if (s.ep != ep) continue;
      fmt::print(
          out, "  {:<18} {:>8.4f} {:>8.4f} {:>8.1f}% {:>10} {:>10} {:>8.1f} {:>8.0f} {:>7.1f}%{}\n",
          s.policy, s.mean_r_before, s.mean_r, 100.0 * s.excess_removed,
          routes_or_dash(s.max_send_out), routes_or_dash(s.max_receive_in), s.remote_copies,
          s.owner_payloads_p99, 100.0 * s.owner_outside_fraction,
          projected
              ? fmt::format(" {:>10.1f}{}", s.projected_us,
                            result.config.projection->ep > 0 && result.config.projection->ep != ep
                                ? "*"
                                : "")
              : "");
    }
  }
}

}  // namespace iser::cli
