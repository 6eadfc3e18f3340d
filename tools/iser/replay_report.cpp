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

// One look per policy in every chart (colour from the Okabe-Ito palette, dash, marker), so a
// reader who learnt it in one figure reads the next; static placements are dashed.
struct SeriesStyle {
  std::string_view policy;
  std::string_view color;
  std::string_view dash;
  svg::Marker marker;
};
constexpr SeriesStyle kStyles[] = {
    {"none", "#000000", "2 3", svg::Marker::kPlus},
    {"eplb", "#D55E00", "7 4", svg::Marker::kSquare},
    {"eplb-window", "#E69F00", "9 3 2 3", svg::Marker::kTriangle},
    {"eplb-equal-mem", "#CC79A7", "4 2", svg::Marker::kDiamond},
    {"eplb-oracle", "#56B4E9", "1 3", svg::Marker::kPlus},
    {"iser", "#0072B2", "", svg::Marker::kCircle},
    {"halo-q", "#009E73", "", svg::Marker::kTriangleDown},
    {"oracle", "#56B4E9", "", svg::Marker::kDiamond},
};

const SeriesStyle* style_of(std::string_view policy) {
  for (const SeriesStyle& style : kStyles) {
    if (style.policy == policy) return &style;
  }
  return nullptr;
}

std::string label_of(std::string_view policy) {
  if (policy == "none") return "no balancing";
  if (policy == "eplb") return "eplb (static, from the past)";
  if (policy == "eplb-window") return "eplb-window (re-planned)";
  if (policy == "eplb-oracle") return "eplb-oracle (bound)";
  return std::string(policy);
}

svg::LineSeries styled_line(std::string_view policy, std::vector<double> x, std::vector<double> y) {
  svg::LineSeries line;
  line.name = label_of(policy);
  line.x = std::move(x);
  line.y = std::move(y);
  if (const SeriesStyle* style = style_of(policy)) {
    line.color = style->color;
    line.dash = style->dash;
    line.marker = style->marker;
  }
  line.marker_every = std::max<int>(1, static_cast<int>(line.x.size()) / 12);
  return line;
}

std::vector<std::string> ep_labels(const ReplayResult& result) {
  std::vector<std::string> labels;
  for (const int ep : result.config.ep_degrees) labels.push_back(fmt::format("EP{}", ep));
  return labels;
}

// Every series of a chart keeps a colour of its own: a series without a style (a policy drawn
// on request), or whose style colour an earlier series already uses, takes the first palette
// colour no series of the chart has (the palette's 8 colours, then repeats).
template <typename Series>
void give_free_colors(std::vector<Series>& series) {
  std::vector<std::string> used;
  for (const Series& s : series) {
    if (!s.color.empty()) used.push_back(s.color);
  }
  std::vector<std::string> taken;
  for (Series& s : series) {
    if (s.color.empty() || std::find(taken.begin(), taken.end(), s.color) != taken.end()) {
      for (size_t i = 0; i < 8; ++i) {
        const std::string candidate(svg::palette_color(i));
        if (std::find(used.begin(), used.end(), candidate) == used.end()) {
          s.color = candidate;
          break;
        }
      }
      if (s.color.empty()) s.color = svg::palette_color(taken.size());
      used.push_back(s.color);
    }
    taken.push_back(s.color);
  }
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
    if (const SeriesStyle* style = style_of(policy)) bars.color = style->color;
    bars.name = label_of(policy);
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
std::string traffic_svg(const ReplayResult& result, bool send_out, const ChartOptions& options) {
  svg::BarChart chart;
  chart.title = send_out ? "Largest dispatch send-out of any rank (routes, mean per invocation)"
                         : "Largest dispatch receive-in of any rank (routes, mean per invocation)";
  chart.categories = ep_labels(result);
  chart.y_axis.label = "routes";
  svg::BarSeries before{"no balancing", {}, "#000000", {}};
  for (const int ep : result.config.ep_degrees) {
    const PolicySummary* s = find_summary(result, ep, result.policies.front());
    before.values.push_back(!s         ? kNan
                            : send_out ? s->max_send_out_before
                                       : s->max_receive_in_before);
  }
  chart.series.push_back(before);
  const auto rest =
      bars_per_policy(result, chart_policies(result, options), [&](const PolicySummary& s) {
        return !s.has_flows ? kNan : send_out ? s.max_send_out : s.max_receive_in;
      });
  chart.series.insert(chart.series.end(), rest.begin(), rest.end());
  give_free_colors(chart.series);
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
  give_free_colors(chart.series);
  return svg::render(chart);
}

std::string static_vs_dynamic_svg(const ReplayResult& result) {
  svg::BarChart chart;
  chart.title = "Static placement vs per-invocation replication: mean R per EP degree";
  chart.categories = ep_labels(result);
  chart.y_axis.label = "mean R (max / mean rank load)";
  chart.y_axis.include_zero = false;
  chart.y_axis.min = 1.0;
  chart.series = bars_per_policy(result,
                                 present(result, {"none", "eplb", "eplb-window", "eplb-equal-mem",
                                                  "eplb-oracle", "halo-q", "iser"}),
                                 [](const PolicySummary& s) { return s.mean_r; });
  if (chart.series.empty()) return {};
  give_free_colors(chart.series);
  return svg::render(chart);
}

// The headline: mean R over layers per measured iteration at one EP degree, per charted
// policy, with no balancing for reference; shows the drift a static placement misses.
std::string per_iteration_svg(const ReplayResult& result, int ep, const ChartOptions& options) {
  const PolicySummary* base = find_summary(result, ep, result.policies.front());
  if (!base || base->per_iteration_mean_r_before.size() < 2) return {};
  svg::LineChart chart;
  chart.title = fmt::format("Mean R per iteration at EP{}, S = {} (mean over {} layer(s))", ep,
                            result.config.num_slots, result.layers.size());
  chart.x_axis.label = fmt::format("iteration (after {} warm-up)", result.warmup_iterations);
  chart.x_axis.min = static_cast<double>(result.warmup_iterations);
  const size_t num_points = base->per_iteration_mean_r_before.size();
  chart.x_axis.max = static_cast<double>(result.warmup_iterations + num_points - 1);
  if (num_points <= 10) {  // iterations are whole numbers: no 2.5 between two of them
    for (size_t j = 0; j < num_points; ++j) {
      chart.x_axis.ticks.push_back(static_cast<double>(result.warmup_iterations + j));
    }
  }
  chart.y_axis.label = "R (max / mean rank load)";
  chart.y_axis.include_zero = false;
  chart.y_axis.min = 1.0;
  std::vector<double> x(base->per_iteration_mean_r_before.size());
  std::iota(x.begin(), x.end(), static_cast<double>(result.warmup_iterations));
  chart.series.push_back(styled_line("none", x, base->per_iteration_mean_r_before));
  for (const auto& policy : chart_policies(result, options)) {
    chart.series.push_back(
        styled_line(policy, x, find_summary(result, ep, policy)->per_iteration_mean_r));
  }
  give_free_colors(chart.series);
  return svg::render(chart);
}

std::string markdown_tables(const ReplayResult& result) {
  const TraceMetadata& m = result.metadata;
  std::string md = fmt::format(
      "\nTrace: `{}` ({}{}E = {}, top-{}, {} layers: ids {}). Tokens per rank {}, S = {}, "
      "g_min = {}.",
      m.source, m.model.empty() ? "" : m.model + ", ", m.dataset.empty() ? "" : m.dataset + ", ",
      m.num_experts, m.top_k, result.layers.size(), fmt::join(result.layer_ids, ", "),
      result.config.tokens_per_rank, result.config.num_slots, result.config.g_min);
  if (result.warmup_iterations > 0) {
    md += fmt::format(
        " The first {} iteration(s) of every layer are warm-up: served, left out of "
        "every mean.",
        result.warmup_iterations);
  }
  md += fmt::format(" Static `eplb` is planned once from {}.", static_plan_source(result));
  const auto& cost = result.config.cost_model;
  if (cost) {
    md += fmt::format(
        " Costs for {} ({} MoE layers, {:.1f} MB per expert, {} shared helper banks): memory = "
        "extra expert weights per GPU (static EPLB: slots x layers; per-invocation: slots x "
        "banks); moved = expert bytes copied per layer invocation (re-plans amortised).",
        cost->name, cost->num_moe_layers, cost->expert_bytes / 1e6, cost->banks);
  }
  md += "\n";
  const bool projected = result.config.projection.has_value();
  for (size_t e = 0; e < result.config.ep_degrees.size(); ++e) {
    const int ep = result.config.ep_degrees[e];
    md += fmt::format("\n## EP{} ({} iteration(s) x {} layers)\n\n", ep,
                      result.iterations_per_ep[e], result.layers.size());
    md +=
        "| policy | mean R | excess removed | max send-out | max receive-in | broadcasts | "
        "remote copies | owner payloads median / p99 / max | owner outside |";
    md += cost ? " memory GB/GPU | moved MB/invocation |" : "";
    md += projected ? " projected layer µs |\n" : "\n";
    md += "|---|---:|---:|---:|---:|---:|---:|---:|---:|";
    md += cost ? "---:|---:|" : "";
    md += projected ? "---:|\n" : "\n";
    const auto dash_or = [](double v, double scale, int digits) {
      return v < 0 ? std::string("–") : fmt::format("{:.{}f}", v / scale, digits);
    };
    for (const PolicySummary& s : result.results) {
      if (s.ep != ep) continue;
      md += fmt::format(
          "| {} | {:.4f} | {:.1f}% | {} | {} | {:.1f} | {:.1f} | {:.0f} / {:.0f} / {} | {:.1f}% |",
          label_of(s.policy), s.mean_r, 100 * s.excess_removed, dash_or(s.max_send_out, 1, 0),
          dash_or(s.max_receive_in, 1, 0), s.broadcasts, s.remote_copies, s.owner_payloads_median,
          s.owner_payloads_p99, s.owner_payloads_max, 100 * s.owner_outside_fraction);
      if (cost) {
        md += fmt::format(" {} | {} |", dash_or(s.extra_memory_bytes, 1e9, 2),
                          dash_or(s.moved_bytes_per_invocation, 1e6, 0));
      }
      md += projected ? fmt::format(" {:.1f} |\n", s.projected_us) : "\n";
    }
  }
  return md;
}

}  // namespace

std::string replay_layer_svg(const ReplayResult& result, int ep, const ChartOptions& options) {
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
  std::vector<double> before;
  for (const size_t l : order) before.push_back(base->per_layer_mean_r_before[l]);
  chart.series.push_back(styled_line("none", x, before));
  for (const auto& policy : chart_policies(result, options)) {
    const PolicySummary* s = find_summary(result, ep, policy);
    std::vector<double> after;
    for (const size_t l : order) after.push_back(s->per_layer_mean_r[l]);
    chart.series.push_back(styled_line(policy, x, std::move(after)));
  }
  give_free_colors(chart.series);
  return svg::render(chart);
}

std::vector<std::filesystem::path> write_layer_svgs(const ReplayResult& result,
                                                    const std::filesystem::path& path,
                                                    const ChartOptions& options) {
  std::vector<std::filesystem::path> written;
  const auto& eps = result.config.ep_degrees;
  for (const int ep : eps) {
    std::filesystem::path out = path;
    if (eps.size() > 1) {
      out = path.parent_path() /
            fmt::format("{}-ep{}{}", path.stem().string(), ep, path.extension().string());
    }
    svg::write_file(out, replay_layer_svg(result, ep, options));
    written.push_back(out);
  }
  return written;
}

void write_replay_report(const ReplayResult& result, const std::filesystem::path& dir,
                         const ChartOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ISER_CHECK(!ec, "cannot create report directory '{}': {}", dir.string(), ec.message());
  std::string md = "# iser replay report\n\n";
  const auto add_figure = [&](const std::string& name, const std::string& document,
                              const std::string& caption) {
    if (document.empty()) return;
    svg::write_file(dir / name, document);
    md += fmt::format("{}\n\n![{}]({})\n\n", caption, name, name);
  };
  const int ep = headline_ep(result);
  if (const std::string line = replay_summary_line(result); !line.empty()) md += line + "\n\n";
  add_figure("headline-r-per-iteration.svg", per_iteration_svg(result, ep, options),
             fmt::format("Mean R over layers per iteration at EP{}: static placements keep the "
                         "plan they made from the past while the served mixture moves.",
                         ep));
  md += markdown_tables(result);
  md += "\n## Figures\n\n";
  add_figure("static-vs-per-invocation.svg", static_vs_dynamic_svg(result),
             fmt::format("Static placement (EPLB planned from {}, or re-planned from a window of "
                         "past iterations) vs per-invocation replication.",
                         static_plan_source(result)));
  for (const auto& file : write_layer_svgs(result, dir / "fig7a-per-layer-r.svg", options)) {
    md += fmt::format("![{}]({})\n\n", file.stem().string(), file.filename().string());
  }
  add_figure("fig7b-send-out.svg", traffic_svg(result, true, options),
             "Figure 7b analogue: the largest number of routes any rank sends to other ranks in "
             "dispatch (not deduplicated per token).");
  add_figure("fig7b-receive-in.svg", traffic_svg(result, false, options),
             "Figure 7b analogue: the largest number of routes any rank receives from other "
             "ranks in dispatch.");
  add_figure("fig4c-owner-payloads.svg", payloads_svg(result),
             "Figure 4c analogue: payloads (broadcasts, or point-to-point copies) sourced by "
             "the busiest owner per invocation, p99.");
  std::ofstream out(dir / "report.md");
  ISER_CHECK(out.good(), "cannot write '{}'", (dir / "report.md").string());
  out << md;
}

}  // namespace iser::cli
