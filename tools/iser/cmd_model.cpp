// `iser model`: the paper's analytic models for hardware we cannot touch (docs/models.md).
//   overlap    §3.1 peak-rate model: how many expert copies hide beside routed/shared experts
//   broadcast  §3.3/§4.3 broadcast algorithm bandwidth (ring, scatter+all-gather, single-port,
//              SAMI)
//   project    layer time t = intercept + slope * R from a fit (preset or JSON file)
//   list       the presets
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "iser/error.h"
#include "iser/model.h"
#include "iser/svg.h"

namespace iser::cli {
namespace {

using json = nlohmann::ordered_json;  // keys in the order written
namespace m = iser::model;

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;

// "12345678" -> "12,345,678" (integers only; the paper's style for counts).
std::string with_commas(double value) {
  const std::string digits = fmt::format("{:.0f}", std::abs(value));
  // Appends rather than inserts: g++ 12 -O3 warns (-Wrestrict, a false positive) on insert here.
  std::string out = value < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// Parses "<number>[unit]" where unit maps to a multiplier; a bare number uses `bare_multiplier`.
double parse_quantity(const std::string& text, std::string_view flag,
                      std::initializer_list<std::pair<std::string_view, double>> units,
                      double bare_multiplier) {
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    throw Error(
        fmt::format("invalid {} '{}': expected a number with an optional unit", flag, text));
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double multiplier = unit.empty() ? bare_multiplier : 0;
  for (const auto& [name, factor] : units) {
    if (unit == name) multiplier = factor;
  }
  std::string known;
  for (const auto& [name, factor] : units) {
    known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
  }
  ISER_CHECK(multiplier > 0, "invalid {} '{}': unknown unit '{}' (known: {})", flag, text, unit,
             known);
  const double value = number * multiplier;
  ISER_CHECK(std::isfinite(value) && value >= 0, "invalid {} '{}': need a value >= 0", flag, text);
  return value;
}

double parse_bytes(const std::string& text, std::string_view flag) {
  return parse_quantity(text, flag,
                        {{"B", 1.0},
                         {"KB", 1e3},
                         {"MB", 1e6},
                         {"GB", 1e9},
                         {"KiB", 1024.0},
                         {"MiB", 1024.0 * 1024},
                         {"GiB", 1024.0 * 1024 * 1024}},
                        1.0);
}

double parse_seconds(const std::string& text, std::string_view flag) {
  return parse_quantity(text, flag, {{"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}}, 1e-6);
}

void check_flag_positive(double value, std::string_view flag) {
  ISER_CHECK(std::isfinite(value) && value > 0, "invalid {} = {}: need a value > 0", flag, value);
}

// The preset value, or the flag's value times `unit` once checked to be > 0.
double flag_or(const std::optional<double>& flag_value, std::string_view flag, double unit,
               double preset) {
  if (!flag_value) return preset;
  check_flag_positive(*flag_value, flag);
  return *flag_value * unit;
}

void print_json(const json& doc) {
  fmt::print("{}\n", doc.dump(2));
}

// ---- overlap -------------------------------------------------------------------------------

struct OverlapArgs {
  std::string hw = "GB300";
  std::string model = "deepseek-v4-pro";
  int ep = 8;
  int64_t tokens_per_rank = 8192;
  int copies = 0;
  std::string routed = "fp4";
  std::string combine;  // empty: the routed precision
  std::string shared = "fp8";
  std::optional<double> fp4_tflops, fp8_tflops, bf16_tflops, link_gbps;
  std::optional<int64_t> hidden, intermediate, shared_hidden, shared_intermediate;
  std::optional<int> experts, top_k, num_shared;
  bool json = false;
  bool sweep = false;
  std::vector<std::string> sweep_models{"deepseek-v4-pro", "kimi-k3"};
  std::vector<int64_t> sweep_tokens{8192, 16384};
  std::vector<int> sweep_copies{0, 1, 2, 4};
  std::string svg_path;
};

m::Hardware hardware_from(const std::string& name, const std::optional<double>& fp4_tflops,
                          const std::optional<double>& fp8_tflops,
                          const std::optional<double>& bf16_tflops,
                          const std::optional<double>& link_gbps) {
  m::Hardware hw = m::find_hardware(name);
  // FP4 may be set to 0 (no FP4 tensor cores); the others must stay positive.
  if (fp4_tflops) {
    ISER_CHECK(std::isfinite(*fp4_tflops) && *fp4_tflops >= 0,
               "invalid --fp4-tflops = {}: need a value >= 0", *fp4_tflops);
    hw.fp4_flops = *fp4_tflops * kTera;
  }
  hw.fp8_flops = flag_or(fp8_tflops, "--fp8-tflops", kTera, hw.fp8_flops);
  hw.bf16_flops = flag_or(bf16_tflops, "--bf16-tflops", kTera, hw.bf16_flops);
  hw.link_bytes_per_s = flag_or(link_gbps, "--link-gbps", kGiga, hw.link_bytes_per_s);
  if (fp4_tflops || fp8_tflops || bf16_tflops || link_gbps) {
    hw.name += "*";  // marks a preset changed by flags
    hw.source += " (changed by flags)";
  }
  hw.validate();
  return hw;
}

bool has_shape_overrides(const OverlapArgs& a) {
  return a.hidden || a.intermediate || a.shared_hidden || a.shared_intermediate || a.experts ||
         a.top_k || a.num_shared;
}

m::MoeShape shape_from(const OverlapArgs& a) {
  m::MoeShape moe = m::find_moe(a.model);
  const auto positive = [](const auto& flag_value, std::string_view flag, int64_t lowest) {
    ISER_CHECK(!flag_value || *flag_value >= lowest, "invalid {} = {}: need a value >= {}", flag,
               flag_value ? static_cast<int64_t>(*flag_value) : 0, lowest);
  };
  positive(a.hidden, "--he", 1);
  positive(a.intermediate, "--inter", 1);
  positive(a.experts, "--experts", 1);
  positive(a.top_k, "--topk", 1);
  positive(a.num_shared, "--shared", 0);
  positive(a.shared_hidden, "--shared-he", 1);
  positive(a.shared_intermediate, "--shared-inter", 1);
  if (a.hidden) moe.hidden = *a.hidden;
  if (a.intermediate) moe.intermediate = *a.intermediate;
  if (a.experts) moe.num_experts = *a.experts;
  if (a.top_k) moe.top_k = *a.top_k;
  if (a.num_shared) moe.num_shared = *a.num_shared;
  if (a.shared_hidden) moe.shared_hidden = *a.shared_hidden;
  if (a.shared_intermediate) moe.shared_intermediate = *a.shared_intermediate;
  if (has_shape_overrides(a)) moe.name += "*";
  moe.validate();
  return moe;
}

json overlap_json(const m::OverlapResult& r) {
  return {{"routed_us", r.routed_us},
          {"shared_us", r.shared_us},
          {"dispatch_us", r.dispatch_us},
          {"combine_us", r.combine_us},
          {"dispatch_combine_us", r.dispatch_combine_us},
          {"copy_us", r.copy_us},
          {"copies_us", r.copies_us},
          {"routed_flops", r.routed_flops},
          {"shared_flops", r.shared_flops},
          {"shared_weight", r.shared_weight},
          {"dispatch_bytes", r.dispatch_bytes},
          {"combine_bytes", r.combine_bytes},
          {"copy_bytes", r.copy_bytes},
          {"ratio_routed", r.ratio_routed},
          {"ratio_with_shared", r.ratio_with_shared},
          {"device_ratio", r.device_ratio},
          {"above_device_routed", r.above_device_routed},
          {"above_device_with_shared", r.above_device_with_shared},
          {"copies_hidden_routed", r.copies_hidden_routed},
          {"copies_hidden_shared", r.copies_hidden_shared},
          {"exposed_routed_us", r.exposed_routed_us},
          {"exposed_us", r.exposed_us},
          {"token_exposed_us", r.token_exposed_us}};
}

void print_overlap(const m::OverlapConfig& c, const m::OverlapResult& r) {
  fmt::print("{} on {}, EP{}, {} tokens/rank, {} cop{} (routed {}, combine {}, shared {})\n",
             c.moe.name, c.hw.name, c.ep, with_commas(static_cast<double>(c.tokens_per_rank)),
             c.copies, c.copies == 1 ? "y" : "ies", m::precision_name(c.routed),
             m::precision_name(c.combine), m::precision_name(c.shared));
  fmt::print("  routed experts       {:9.1f} us  ({:.4g} TFLOP)\n", r.routed_us,
             r.routed_flops / kTera);
  fmt::print("  shared expert        {:9.1f} us  ({:.4g} TFLOP)\n", r.shared_us,
             r.shared_flops / kTera);
  fmt::print("  dispatch             {:9.1f} us  ({:.4g} MB per direction)\n", r.dispatch_us,
             r.dispatch_bytes / 1e6);
  fmt::print("  combine              {:9.1f} us  ({:.4g} MB per direction)\n", r.combine_us,
             r.combine_bytes / 1e6);
  fmt::print("  dispatch + combine   {:9.1f} us\n", r.dispatch_combine_us);
  fmt::print("  one copy             {:9.1f} us  (W = {:.2f} MB)\n", r.copy_us, r.copy_bytes / 1e6);
  fmt::print("  {:<20} {:9.1f} us\n",
             fmt::format("{} cop{}", c.copies, c.copies == 1 ? "y" : "ies"), r.copies_us);
  fmt::print(
      "  math/comm            routed {} FLOP/B ({}), with shared {} FLOP/B ({}); "
      "device {} FLOP/B\n",
      with_commas(r.ratio_routed), r.above_device_routed ? "above" : "below",
      with_commas(r.ratio_with_shared), r.above_device_with_shared ? "above" : "below",
      with_commas(r.device_ratio));
  fmt::print(
      "  copies that hide     beside routed experts {:.2f}, beside the shared expert "
      "{:.2f}\n",
      r.copies_hidden_routed, r.copies_hidden_shared);
  fmt::print(
      "  exposed              copies beside routed only {:.1f} us; copies from the shared "
      "expert on {:.1f} us; token traffic {:.1f} us\n",
      r.exposed_routed_us, r.exposed_us, r.token_exposed_us);
}

std::string overlap_svg(const m::OverlapConfig& base, const std::vector<m::OverlapScenario>& rows) {
  svg::BarChart chart;
  const double device = rows.front().result.device_ratio;
  const double weight = rows.front().result.shared_weight;
  const auto count = [&](bool shared) {
    int above = 0;
    for (const auto& s : rows) {
      above += shared ? s.result.above_device_with_shared : s.result.above_device_routed;
    }
    return above;
  };
  chart.title =
      fmt::format("{}, FP8 x{:.3g}: {}/{} -> {}/{} above the line ({})", base.hw.name, weight,
                  count(false), rows.size(), count(true), rows.size(), with_commas(device));
  chart.x_label = "copies n / tokens per rank / model";
  chart.y_axis.label = "math/comm (FLOP/B)";
  svg::BarSeries routed{"routed only", {}, "#D55E00", {}};
  svg::BarSeries shared{"+ shared expert", {}, "#009E73", {}};
  for (const auto& s : rows) {
    chart.categories.push_back(fmt::format(
        "{}\n{}\n{}", s.copies, with_commas(static_cast<double>(s.tokens_per_rank)), s.model));
    routed.values.push_back(s.result.ratio_routed);
    routed.hatched.push_back(!s.result.above_device_routed);
    shared.values.push_back(s.result.ratio_with_shared);
    shared.hatched.push_back(!s.result.above_device_with_shared);
  }
  chart.series = {routed, shared};
  chart.ref_lines.push_back(
      {device, fmt::format("device ratio {}", with_commas(device)), "#333333"});
  chart.height = 480;
  return svg::render(chart);
}

void run_overlap(const OverlapArgs& a) {
  // The flags' lower bounds (the model names its fields and checks the upper bounds).
  ISER_CHECK(a.ep >= 2, "invalid --ep = {}: need a value >= 2", a.ep);
  ISER_CHECK(a.tokens_per_rank >= 1, "invalid --tokens-per-rank = {}: need a value >= 1",
             a.tokens_per_rank);
  ISER_CHECK(a.copies >= 0, "invalid --copies = {}: need a value >= 0", a.copies);
  m::OverlapConfig config;
  config.hw = hardware_from(a.hw, a.fp4_tflops, a.fp8_tflops, a.bf16_tflops, a.link_gbps);
  config.ep = a.ep;
  config.tokens_per_rank = a.tokens_per_rank;
  config.copies = a.copies;
  config.routed = m::parse_precision(a.routed, "--precision");
  config.combine = a.combine.empty() ? config.routed : m::parse_precision(a.combine, "--combine");
  config.shared = m::parse_precision(a.shared, "--shared-precision");
  if (!a.sweep) {
    ISER_CHECK(a.svg_path.empty(), "--svg needs --sweep (it draws the sweep's ratios)");
    config.moe = shape_from(a);
    const m::OverlapResult result = m::model_overlap(config);
    if (!a.json) return print_overlap(config, result);
    json doc = {{"hw", config.hw.name},
                {"model", config.moe.name},
                {"ep", config.ep},
                {"tokens_per_rank", config.tokens_per_rank},
                {"copies", config.copies},
                {"precision", m::precision_name(config.routed)},
                {"combine", m::precision_name(config.combine)},
                {"shared_precision", m::precision_name(config.shared)}};
    doc.update(overlap_json(result));
    return print_json(doc);
  }
  ISER_CHECK(!has_shape_overrides(a),
             "shape flags (--he, --inter, --experts, --topk, --shared, --shared-he, "
             "--shared-inter) apply to one --model; they cannot be combined with --sweep");
  std::vector<m::MoeShape> models;
  for (const std::string& name : a.sweep_models) models.push_back(m::find_moe(name));
  config.moe = models.front();
  const auto rows = m::sweep_overlap(config, models, a.sweep_tokens, a.sweep_copies);
  if (!a.svg_path.empty()) svg::write_file(a.svg_path, overlap_svg(config, rows));
  if (a.json) {
    json list = json::array();
    for (const auto& s : rows) {
      json row = {{"model", s.model}, {"tokens_per_rank", s.tokens_per_rank}, {"copies", s.copies}};
      row.update(overlap_json(s.result));
      list.push_back(std::move(row));
    }
    return print_json(list);
  }
  fmt::print("{}, EP{}, routed {}, combine {}, shared {} (x{:.3g}); device ratio {} FLOP/B\n",
             config.hw.name, config.ep, m::precision_name(config.routed),
             m::precision_name(config.combine), m::precision_name(config.shared),
             rows.front().result.shared_weight, with_commas(rows.front().result.device_ratio));
  fmt::print("{:<18} {:>11} {:>6} {:>12} {:>6} {:>12} {:>6} {:>9} {:>9}\n", "model", "tokens/rank",
             "copies", "routed FLOP/B", "above", "+shared FLOP/B", "above", "hide(rt)", "hide(sh)");
  int above_routed = 0;
  int above_shared = 0;
  double lo = INFINITY;
  double hi = -INFINITY;
  for (const auto& s : rows) {
    const auto& r = s.result;
    above_routed += r.above_device_routed;
    above_shared += r.above_device_with_shared;
    lo = std::min(lo, r.ratio_with_shared);
    hi = std::max(hi, r.ratio_with_shared);
    fmt::print("{:<18} {:>11} {:>6} {:>12} {:>6} {:>12} {:>6} {:>9.2f} {:>9.2f}\n", s.model,
               with_commas(static_cast<double>(s.tokens_per_rank)), s.copies,
               with_commas(r.ratio_routed), r.above_device_routed ? "yes" : "no",
               with_commas(r.ratio_with_shared), r.above_device_with_shared ? "yes" : "no",
               r.copies_hidden_routed, r.copies_hidden_shared);
  }
  fmt::print(
      "routed only: {}/{} above the device ratio; with the shared expert: {}/{} "
      "(ratio {}-{} FLOP/B)\n",
      above_routed, rows.size(), above_shared, rows.size(), with_commas(lo), with_commas(hi));
}

void add_overlap(CLI::App& parent) {
  auto args = std::make_shared<OverlapArgs>();
  auto* cmd = parent.add_subcommand(
      "overlap", "§3.1 peak-rate model: copy-hiding room beside routed and shared experts");
  cmd->add_option("--hw", args->hw, "hardware preset (see `iser model list`)")
      ->capture_default_str();
  cmd->add_option("--model", args->model, "model preset (see `iser model list`)")
      ->capture_default_str();
  cmd->add_option("--ep", args->ep, "EP degree P")->capture_default_str();
  cmd->add_option("--tokens-per-rank", args->tokens_per_rank, "tokens per rank (before top-k)")
      ->capture_default_str();
  cmd->add_option("--copies", args->copies, "expert copies the rank sends or receives")
      ->capture_default_str();
  cmd->add_option("--combine", args->combine,
                  "combine precision: fp4|fp8|bf16 (default: the routed precision)");
  cmd->add_option("--precision", args->routed,
                  "routed experts, dispatched tokens and copied weights: fp4|fp8|bf16")
      ->capture_default_str();
  cmd->add_option("--shared-precision", args->shared, "shared-expert GEMMs: fp4|fp8|bf16")
      ->capture_default_str();
  cmd->add_option("--fp4-tflops", args->fp4_tflops, "override dense FP4 TFLOP/s (0 = none)");
  cmd->add_option("--fp8-tflops", args->fp8_tflops, "override dense FP8 TFLOP/s");
  cmd->add_option("--bf16-tflops", args->bf16_tflops, "override dense BF16 TFLOP/s");
  cmd->add_option("--link-gbps", args->link_gbps, "override NVLink GB/s per direction");
  cmd->add_option("--he", args->hidden, "override routed expert input width He");
  cmd->add_option("--inter", args->intermediate, "override routed intermediate size I");
  cmd->add_option("--experts", args->experts, "override routed experts E");
  cmd->add_option("--topk", args->top_k, "override top-k");
  cmd->add_option("--shared", args->num_shared, "override number of shared experts");
  cmd->add_option("--shared-he", args->shared_hidden, "override shared expert input width");
  cmd->add_option("--shared-inter", args->shared_intermediate,
                  "override shared expert intermediate size");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->add_flag("--sweep", args->sweep, "the paper's Figure 3 grid: models x tokens/rank x copies");
  cmd->add_option("--sweep-models", args->sweep_models, "models of the sweep")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--sweep-tokens", args->sweep_tokens, "tokens/rank values of the sweep")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--sweep-copies", args->sweep_copies, "copy counts of the sweep")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--svg", args->svg_path, "with --sweep: write a Figure 3-style bar chart");
  cmd->callback([args] { run_overlap(*args); });
}

// ---- broadcast -----------------------------------------------------------------------------

struct BroadcastArgs {
  std::string hw = "GB300";
  std::optional<double> link_gbps;
  std::string bytes = "37158912";  // one DeepSeek-V4-Pro NVFP4 expert (3 He I b)
  std::string group = "2..16";
  std::string alpha = "5us";
  std::string slice = "2MiB";
  std::string sami_slice = "8KiB";
  double port_rate_gbps = 2100;
  bool json = false;
  bool csv = false;
  std::string svg_path;
};

std::pair<int, int> parse_group_range(const std::string& text) {
  const size_t dots = text.find("..");
  const auto parse_int = [&](const std::string& part) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ISER_CHECK(used == part.size() && used > 0,
               "invalid --group '{}': expected g or g_min..g_max (e.g. 2..16)", text);
    return value;
  };
  if (dots == std::string::npos) {
    const int g = parse_int(text);
    return {g, g};
  }
  return {parse_int(text.substr(0, dots)), parse_int(text.substr(dots + 2))};
}

constexpr const char* kAlgoLabels[] = {"A: ring (model)", "B: scatter + all-gather (model)",
                                       "C: one port (model)", "D: SAMI (model)"};

void run_broadcast(const BroadcastArgs& a) {
  ISER_CHECK(!(a.json && a.csv), "--json and --csv are exclusive");
  const m::Hardware& hw = m::find_hardware(a.hw);
  m::BroadcastConfig config;
  config.bytes = parse_bytes(a.bytes, "--bytes");
  check_flag_positive(config.bytes, "--bytes");
  config.link_bytes_per_s = flag_or(a.link_gbps, "--link-gbps", kGiga, hw.link_bytes_per_s);
  config.alpha_s = parse_seconds(a.alpha, "--alpha");
  config.ring_slice_bytes = parse_bytes(a.slice, "--slice");
  check_flag_positive(config.ring_slice_bytes, "--slice");
  config.sami_slice_bytes = parse_bytes(a.sami_slice, "--sami-slice");
  check_flag_positive(config.sami_slice_bytes, "--sami-slice");
  check_flag_positive(a.port_rate_gbps, "--port-rate");
  config.port_rate_bytes_per_s = a.port_rate_gbps * kGiga;
  const auto [g_min, g_max] = parse_group_range(a.group);
  const auto points = m::broadcast_sweep(config, g_min, g_max);

  if (!a.svg_path.empty()) {
    svg::LineChart chart;
    chart.title = fmt::format("Broadcast algorithm bandwidth, W = {:.2f} MB, alpha = {:g} us",
                              config.bytes / 1e6, config.alpha_s * 1e6);
    chart.x_axis.label = "group size g (GPUs)";
    chart.x_axis.ticks = {2, 4, 8, 12, 16};
    if (g_max > 16 || g_min > 2) chart.x_axis.ticks.clear();
    chart.y_axis.label = "algorithm BW (GB/s)";
    for (const m::BroadcastAlgo algo : m::kBroadcastAlgos) {
      svg::LineSeries series;
      series.name = kAlgoLabels[static_cast<size_t>(algo)];
      for (const auto& p : points) {
        series.x.push_back(p.group_size);
        series.y.push_back(p.bandwidth_bytes_per_s[static_cast<size_t>(algo)] / kGiga);
      }
      chart.series.push_back(std::move(series));
    }
    chart.ref_lines.push_back({config.link_bytes_per_s / kGiga,
                               fmt::format("B_link ({:g} GB/s)", config.link_bytes_per_s / kGiga),
                               "#555555"});
    svg::write_file(a.svg_path, svg::render(chart));
  }
  if (a.json) {
    json list = json::array();
    for (const auto& p : points) {
      json row = {{"group", p.group_size}};
      for (const m::BroadcastAlgo algo : m::kBroadcastAlgos) {
        const auto idx = static_cast<size_t>(algo);
        const std::string name(m::broadcast_algo_name(algo));
        row[name + "_gbps"] = p.bandwidth_bytes_per_s[idx] / kGiga;
        row[name + "_us"] = p.time_s[idx] * 1e6;
      }
      list.push_back(std::move(row));
    }
    return print_json({{"bytes", config.bytes},
                       {"link_gbps", config.link_bytes_per_s / kGiga},
                       {"alpha_us", config.alpha_s * 1e6},
                       {"slice_bytes", config.ring_slice_bytes},
                       {"sami_slice_bytes", config.sami_slice_bytes},
                       {"port_rate_gbps", config.port_rate_bytes_per_s / kGiga},
                       {"points", list}});
  }
  if (a.csv) {
    fmt::print("group");
    for (const auto algo : m::kBroadcastAlgos) fmt::print(",{}_gbps", m::broadcast_algo_name(algo));
    for (const auto algo : m::kBroadcastAlgos) fmt::print(",{}_us", m::broadcast_algo_name(algo));
    fmt::print("\n");
    for (const auto& p : points) {
      fmt::print("{}", p.group_size);
      for (const double bw : p.bandwidth_bytes_per_s) fmt::print(",{:.3f}", bw / kGiga);
      for (const double t : p.time_s) fmt::print(",{:.3f}", t * 1e6);
      fmt::print("\n");
    }
    return;
  }
  fmt::print(
      "W = {} B, B_link = {:g} GB/s, alpha = {:g} us, ring slice {} B, one-port rate "
      "{:g} GB/s, SAMI slice {} B\n",
      with_commas(config.bytes), config.link_bytes_per_s / kGiga, config.alpha_s * 1e6,
      with_commas(config.ring_slice_bytes), config.port_rate_bytes_per_s / kGiga,
      with_commas(config.sami_slice_bytes));
  fmt::print("{:>3} {:>10} {:>18} {:>12} {:>10}   algorithm bandwidth, GB/s\n", "g", "ring",
             "scatter+allgather", "single-port", "SAMI");
  for (const auto& p : points) {
    fmt::print("{:>3} {:>10.1f} {:>18.1f} {:>12.1f} {:>10.1f}\n", p.group_size,
               p.bandwidth_bytes_per_s[0] / kGiga, p.bandwidth_bytes_per_s[1] / kGiga,
               p.bandwidth_bytes_per_s[2] / kGiga, p.bandwidth_bytes_per_s[3] / kGiga);
  }
}

void add_broadcast(CLI::App& parent) {
  auto args = std::make_shared<BroadcastArgs>();
  auto* cmd = parent.add_subcommand(
      "broadcast", "§3.3/§4.3 broadcast models: ring, scatter+all-gather, one port, SAMI");
  cmd->add_option("--hw", args->hw, "hardware preset for B_link")->capture_default_str();
  cmd->add_option("--link-gbps", args->link_gbps, "override B_link, GB/s per direction");
  cmd->add_option("--bytes", args->bytes, "payload W (B, KB, MB, GB, KiB, MiB, GiB)")
      ->capture_default_str();
  cmd->add_option("--group", args->group, "group size g, or a range g_min..g_max")
      ->capture_default_str();
  cmd->add_option("--alpha", args->alpha, "latency per step (s, ms, us, ns; bare = us)")
      ->capture_default_str();
  cmd->add_option("--slice", args->slice, "ring pipeline slice c")->capture_default_str();
  cmd->add_option("--sami-slice", args->sami_slice, "SAMI pipeline slice")->capture_default_str();
  cmd->add_option("--port-rate", args->port_rate_gbps,
                  "measured multicast output of one ingress port, GB/s (paper: 2,000-2,100 on "
                  "GB200)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->add_flag("--csv", args->csv, "print CSV");
  cmd->add_option("--svg", args->svg_path, "write a Figure 5(b)-style line chart");
  cmd->callback([args] { run_broadcast(*args); });
}

// ---- project -------------------------------------------------------------------------------

struct ProjectArgs {
  std::string fit = "gb200-ep8";
  std::vector<double> r;
  bool json = false;
};

void run_project(const ProjectArgs& a) {
  const m::LayerTimeFit fit = m::find_layer_time_fit(a.fit);
  const double balanced_us = fit.project_us(1.0);
  std::vector<double> t_us;  // every R is checked before anything is printed
  for (const double r : a.r) t_us.push_back(fit.project_us(r));
  if (a.json) {
    json rows = json::array();
    for (size_t i = 0; i < a.r.size(); ++i) {
      rows.push_back({{"r", a.r[i]}, {"t_us", t_us[i]}, {"excess_us", t_us[i] - balanced_us}});
    }
    return print_json({{"fit", json::parse(m::layer_time_fit_json(fit))}, {"projections", rows}});
  }
  fmt::print(
      "{}: t = {:g} + {:g} R us{}{} ({})\n", fit.name, fit.intercept_us, fit.slope_us,
      fit.ep ? fmt::format(", EP{}", fit.ep) : "",
      fit.tokens_per_rank
          ? fmt::format(", {} tokens/rank", with_commas(static_cast<double>(fit.tokens_per_rank)))
          : "",
      fit.source);
  for (size_t i = 0; i < a.r.size(); ++i) {
    fmt::print("  R = {:<8g} t = {:9.1f} us   (+{:.1f} us, +{:.1f}% over R = 1)\n", a.r[i], t_us[i],
               t_us[i] - balanced_us, (t_us[i] / balanced_us - 1) * 100);
  }
}

void add_project(CLI::App& parent) {
  auto args = std::make_shared<ProjectArgs>();
  auto* cmd = parent.add_subcommand("project", "layer time t = intercept + slope R from a fit");
  cmd->add_option("--fit", args->fit,
                  "preset name or JSON file {name, intercept_us, slope_us, "
                  "ep, tokens_per_rank}")
      ->capture_default_str();
  cmd->add_option("--r", args->r, "imbalance ratio(s) R (comma-separated)")
      ->delimiter(',')
      ->required();
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args] { run_project(*args); });
}

// ---- list ----------------------------------------------------------------------------------

void run_list() {
  fmt::print("hardware (dense TFLOP/s fp4/fp8/bf16, NVLink GB/s per direction):\n");
  for (const m::Hardware& hw : m::hardware_presets()) {
    fmt::print("  {:<6} {:>7g} {:>7g} {:>7g} {:>6g}  {}\n", hw.name, hw.fp4_flops / kTera,
               hw.fp8_flops / kTera, hw.bf16_flops / kTera, hw.link_bytes_per_s / kGiga, hw.source);
  }
  fmt::print("models (He, I, E, k, shared x He_s x I_s):\n");
  for (const m::MoeShape& s : m::moe_presets()) {
    fmt::print("  {:<16} {} {} {} {} {}x{}x{}  {}\n", s.name, s.hidden, s.intermediate,
               s.num_experts, s.top_k, s.num_shared, s.shared_hidden, s.shared_intermediate,
               s.source);
  }
  fmt::print("layer-time fits:\n");
  for (const m::LayerTimeFit& f : m::layer_time_presets()) {
    fmt::print("  {:<10} t = {:g} + {:g} R us (EP{}, {} tokens/rank)  {}\n", f.name, f.intercept_us,
               f.slope_us, f.ep, f.tokens_per_rank, f.source);
  }
}

}  // namespace

void add_model_command(CLI::App& app) {
  auto* model = app.add_subcommand("model", "analytic models for hardware we cannot touch");
  model->require_subcommand(1);
  add_overlap(*model);
  add_broadcast(*model);
  add_project(*model);
  model->add_subcommand("list", "hardware, model and layer-time presets")->callback(run_list);
}

}  // namespace iser::cli
