// Figures and the Markdown report of `iser replay --svg/--report`.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include "iser/error.h"
#include "iser/svg.h"
#include "replay_output.h"

namespace iser::cli {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

const PolicySummary* find_summary(const ReplayResult& result, int ep, std::string_view policy) {
  for (const PolicySummary& s : result.results) {
    if (s.ep == ep && s.policy == policy) return &s;
  }
  return nullptr;
}

std::vector<std::string> ep_labels(const ReplayResult& result) {
  std::vector<std::string> labels;
  for (const int ep : result.config.ep_degrees) labels.push_back(fmt::format("EP{}", ep));
  return labels;
}

// One bar series per policy (in replay order) over EP degrees; `value` returns NaN to skip.
template <typename Value>
std::vector<svg::BarSeries> bars_per_policy(const ReplayResult& result,
                                            const std::vector<std::string>& policies, Value value) {
  std::vector<svg::BarSeries> series;
  for (const auto& policy : policies) {
    svg::BarSeries bars;
    bars.name = policy;
    bool any = false;
    for (const int ep : result.config.ep_degrees) {
      const PolicySummary* s = find_summary(result, ep, policy);
      const double v = s ? value(*s) : kNan;
      any = any || !std::isnan(v);
      bars.values.push_back(v);
    }
    if (any) series.push_back(std::move(bars));
  }
  return series;
}

std::vector<std::string> present(const ReplayResult& result,
                                 std::initializer_list<std::string_view> wanted) {
  std::vector<std::string> out;
  for (const auto& p : result.policies) {
    if (std::find(wanted.begin(), wanted.end(), p) != wanted.end()) out.push_back(p);
  }
  return out;
}

// Figure 7b: one bar per policy with route placement; `before` (no balancing) first.
std::string traffic_svg(const ReplayResult& result, bool send_out) {
  svg::BarChart chart;
  chart.title = send_out ? "Largest dispatch send-out of any rank (routes, mean per invocation)"
                         : "Largest dispatch receive-in of any rank (routes, mean per invocation)";
  chart.categories = ep_labels(result);
  chart.y_axis.label = "routes";
  svg::BarSeries before{"no balancing", {}, "", {}};
  for (const int ep : result.config.ep_degrees) {
    const PolicySummary* s = find_summary(result, ep, result.policies.front());
    before.values.push_back(!s         ? kNan
                            : send_out ? s->max_send_out_before
                                       : s->max_receive_in_before);
  }
  chart.series.push_back(before);
  std::vector<std::string> policies;
  for (const auto& p : result.policies) {
    if (p != "none") policies.push_back(p);
  }
  const auto rest = bars_per_policy(result, policies, [&](const PolicySummary& s) {
    return !s.has_flows ? kNan : send_out ? s.max_send_out : s.max_receive_in;
  });
  chart.series.insert(chart.series.end(), rest.begin(), rest.end());
  return svg::render(chart);
}

std::string payloads_svg(const ReplayResult& result) {
  svg::BarChart chart;
  chart.title = "Payloads sourced by the busiest owner per invocation (p99)";
  chart.categories = ep_labels(result);
  chart.y_axis.label = "payloads (broadcasts or copies)";
  chart.series =
      bars_per_policy(result, present(result, {"p2p", "p2p-limited", "halo-q", "iser", "all-rank"}),
                      [](const PolicySummary& s) { return s.owner_payloads_p99; });
  if (chart.series.empty()) return {};
  chart.ref_lines.push_back({static_cast<double>(result.config.num_slots),
                             fmt::format("S = {}", result.config.num_slots), "#555555"});
  return svg::render(chart);
}

std::string static_vs_dynamic_svg(const ReplayResult& result) {
  svg::BarChart chart;
  chart.title = "Static placement vs per-invocation replication: mean R";
  chart.categories = ep_labels(result);
  chart.y_axis.label = "mean R (max / mean rank load)";
  chart.y_axis.include_zero = false;
  chart.y_axis.min = 1.0;
  chart.series = bars_per_policy(
      result, present(result, {"none", "eplb", "eplb-window", "all-rank", "halo-q", "iser"}),
      [](const PolicySummary& s) { return s.mean_r; });
  if (chart.series.empty()) return {};
  return svg::render(chart);
}

std::string markdown_tables(const ReplayResult& result) {
  const TraceMetadata& m = result.metadata;
  std::string md = fmt::format(
      "# iser replay report\n\nTrace: `{}` ({}{}E = {}, top-{}, {} layers). Tokens per rank "
      "{}, S = {}, g_min = {}.\n",
      m.source, m.model.empty() ? "" : m.model + ", ", m.dataset.empty() ? "" : m.dataset + ", ",
      m.num_experts, m.top_k, result.layers.size(), result.config.tokens_per_rank,
      result.config.num_slots, result.config.g_min);
  for (size_t e = 0; e < result.config.ep_degrees.size(); ++e) {
    const int ep = result.config.ep_degrees[e];
    md += fmt::format("\n## EP{} ({} iteration(s) x {} layers)\n\n", ep,
                      result.iterations_per_ep[e], result.layers.size());
    md +=
        "| policy | mean R | excess removed | max send-out | max receive-in | broadcasts | "
        "remote copies | owner payloads median / p99 / max | owner outside |";
    const bool projected = result.config.projection.has_value();
    md += projected ? " projected layer µs |\n" : "\n";
    md += "|---|---:|---:|---:|---:|---:|---:|---:|---:|";
    md += projected ? "---:|\n" : "\n";
    for (const PolicySummary& s : result.results) {
      if (s.ep != ep) continue;
      const auto routes = [](double v) {
        return v < 0 ? std::string("–") : fmt::format("{:.0f}", v);
      };
      md += fmt::format(
          "| {} | {:.4f} | {:.1f}% | {} | {} | {:.1f} | {:.1f} | {:.0f} / {:.0f} / {} | {:.1f}% |",
          s.policy, s.mean_r, 100 * s.excess_removed, routes(s.max_send_out),
          routes(s.max_receive_in), s.broadcasts, s.remote_copies, s.owner_payloads_median,
          s.owner_payloads_p99, s.owner_payloads_max, 100 * s.owner_outside_fraction);
      md += projected ? fmt::format(" {:.1f} |\n", s.projected_us) : "\n";
    }
  }
  return md;
}

}  // namespace

std::string replay_layer_svg(const ReplayResult& result, int ep) {
  const PolicySummary* base = find_summary(result, ep, result.policies.front());
  ISER_CHECK(base != nullptr, "no results at EP{}", ep);
  // Layers sorted by R before balancing (Figure 7a).
  std::vector<size_t> order(result.layers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return base->per_layer_mean_r_before[a] < base->per_layer_mean_r_before[b];
  });
  svg::LineChart chart;
  chart.title = fmt::format("Per-layer mean R at EP{} (layers sorted by R without balancing)", ep);
  chart.x_axis.label = "layer rank (sorted by R before)";
  chart.y_axis.label = "mean R (max / mean rank load)";
  chart.y_axis.include_zero = false;
  chart.y_axis.min = 1.0;
  std::vector<double> x(order.size());
  std::iota(x.begin(), x.end(), 0.0);
  svg::LineSeries before{"no balancing", x, {}, "", false, true};
  for (const size_t l : order) before.y.push_back(base->per_layer_mean_r_before[l]);
  chart.series.push_back(before);
  for (const auto& policy : result.policies) {
    if (policy == "none") continue;
    const PolicySummary* s = find_summary(result, ep, policy);
    svg::LineSeries after{policy, x, {}, "", false, true};
    for (const size_t l : order) after.y.push_back(s->per_layer_mean_r[l]);
    chart.series.push_back(std::move(after));
  }
  return svg::render(chart);
}

std::vector<std::filesystem::path> write_layer_svgs(const ReplayResult& result,
                                                    const std::filesystem::path& path) {
  std::vector<std::filesystem::path> written;
  const auto& eps = result.config.ep_degrees;
  for (const int ep : eps) {
    std::filesystem::path out = path;
    if (eps.size() > 1) {
      out = path.parent_path() /
            fmt::format("{}-ep{}{}", path.stem().string(), ep, path.extension().string());
    }
    svg::write_file(out, replay_layer_svg(result, ep));
    written.push_back(out);
  }
  return written;
}

void write_replay_report(const ReplayResult& result, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ISER_CHECK(!ec, "cannot create report directory '{}': {}", dir.string(), ec.message());
  std::string md = markdown_tables(result);
  md += "\n## Figures\n\n";
  for (const auto& file : write_layer_svgs(result, dir / "fig7a-per-layer-r.svg")) {
    md += fmt::format("![{}]({})\n\n", file.stem().string(), file.filename().string());
  }
  const auto add_figure = [&](const std::string& name, const std::string& document,
                              const std::string& caption) {
    if (document.empty()) return;
    svg::write_file(dir / name, document);
    md += fmt::format("{}\n\n![{}]({})\n\n", caption, name, name);
  };
  add_figure("fig7b-send-out.svg", traffic_svg(result, true),
             "Figure 7b analogue: the largest number of routes any rank sends to other ranks in "
             "dispatch (not deduplicated per token).");
  add_figure("fig7b-receive-in.svg", traffic_svg(result, false),
             "Figure 7b analogue: the largest number of routes any rank receives from other "
             "ranks in dispatch.");
  add_figure("fig4c-owner-payloads.svg", payloads_svg(result),
             "Figure 4c analogue: payloads (broadcasts, or point-to-point copies) sourced by "
             "the busiest owner per invocation, p99.");
  add_figure("static-vs-per-invocation.svg", static_vs_dynamic_svg(result),
             "Static placement (EPLB from the whole trace or a window of past iterations) vs "
             "per-invocation replication.");
  std::ofstream out(dir / "report.md");
  ISER_CHECK(out.good(), "cannot write '{}'", (dir / "report.md").string());
  out << md;
}

}  // namespace iser::cli
