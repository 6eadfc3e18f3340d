// E3 analogue on one GPU (bench/moe/moe_bench.h): the paper's Figure 9 with cuBLAS (GroupedMlp)
// standing in for MegaMoE. EP ranks are simulated: every rank's expert computation is the
// same grouped gated MLP over its H home + S helper slots, so each rank is timed alone on the one
// GPU with its own per-slot loads, and a cell reports its slowest rank.
//
// Routing from the routing data layer (include/iser/trace.h): (a) the synthetic power-law
// generator (Zipf exponent alpha) and (b) a per-layer histogram trace (default: the bundled
// DeepSeek-V4.1-Flash coding histograms), both sampled with the E3 rule of docs/design.md §8 (each
// token draws top-k distinct experts with probability proportional to the count), iteration 0.
// --variants times several GroupedMlp schedules in one process, each against its own balanced
// control; the fair baseline across them is the fastest balanced time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/moe/bench_routing.h"
#include "bench/moe/moe_bench.h"
#include "core/trace/rng.h"
#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/counts.h"
#include "iser/error.h"
#include "iser/metrics.h"
#include "iser/moe.h"
#include "iser/policy.h"
#include "iser/trace.h"

namespace iser::moe {

using cuda::DeviceBuffer;
namespace {

struct E3Options {
  std::vector<std::string> routings = {"power-law", "trace"};
  std::vector<int> tokens = {8192, 16384};
  std::string trace_path;         // empty: the bundled trace
  std::string layers = "3:39:4";  // trace layers: first:last:step or a comma list
  double alpha = 0.8;
  int num_ranks = 8;
  int num_experts = 384;
  int num_slots = 4;
  int top_k = 6;
  ExpertShape shape;
  std::string policy = "halo-q";
  int warmup = 3;
  int iters = 20;
  double margin = 0.02;  // time every rank whose load is within this fraction of the largest
  uint64_t seed = 1;
  bool graph = false;
  std::string gemm = "lt";
  // kLtPinned scheduling variants, each "lanes:chain:tails[:option...]" (see parse_variant);
  // empty: the GroupedMlpOptions defaults.
  std::vector<std::string> variants;
  bool decompose = false;  // attribute the first variant's ON-vs-balanced gap (decompose_cell)
  // Balanced control: "sampled" (default: perfectly balanced routing, the paper's control; the
  // rank's tau*k routes each drawn uniformly over its H home slots: equal rank loads, slot sizes
  // with the sampling noise of uniform routing) or "exact" (every home slot tau*k/H rows: whole
  // granules at the defaults, no tail launch, counts no router produces).
  std::string balanced = "sampled";
  std::string json_path;
};

struct Variant {
  std::string name;
  GroupedMlpOptions options;
  bool graph = false;  // time CUDA-graph launches of the captured call
};

// "lanes:chain:tails[:option...]": lanes = num_lanes, chain 0/1 = chain_slots, tails = off or
// min_tail_granule; options: p<rows> = priority_below_rows, g = CUDA-graph timing.
Variant parse_variant(const std::string& spec, GemmBackend backend) {
  Variant v{spec, {}};
  v.options.backend = backend;
  std::vector<std::string> fields;
  std::stringstream stream(spec);
  for (std::string field; std::getline(stream, field, ':');) fields.push_back(field);
  const auto number = [&](const std::string& text, const char* what) {
    char* end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    ISER_CHECK(!text.empty() && *end == '\0' && value >= 0 && value <= (1 << 20),
               "--variants '{}': {} '{}' is not a number in [0, 2^20]", spec, what, text);
    return static_cast<int>(value);
  };
  ISER_CHECK(fields.size() >= 3,
             "--variants '{}': expected lanes:chain:tails[:option...], e.g. 4:1:64, 4:0:off, "
             "8:1:8:p256 or 8:1:8:g",
             spec);
  v.options.num_lanes = number(fields[0], "lanes");
  const int chain = number(fields[1], "chain");
  ISER_CHECK(chain == 0 || chain == 1, "--variants '{}': chain must be 0 or 1", spec);
  v.options.chain_slots = chain == 1;
  v.options.min_tail_granule = fields[2] == "off" ? 0 : number(fields[2], "tails");
  ISER_CHECK(fields[2] == "off" || v.options.min_tail_granule > 0,
             "--variants '{}': tails must be off or a positive row granule", spec);
  for (size_t i = 3; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    const std::string rest = f.empty() ? "" : f.substr(1);
    if (f == "g") {
      v.graph = true;
    } else if (f.starts_with('p')) {
      v.options.priority_below_rows = number(rest, "p<rows>");
    } else {
      ISER_CHECK(false, "--variants '{}': unknown option '{}' (p<rows>, g)", spec, f);
    }
  }
  return v;
}

// ---- timing --------------------------------------------------------------------------------

class RankTimer {
 public:
  RankTimer(GroupedMlp& mlp, const void* x, void* y, int warmup, int iters, bool graph)
      : mlp_(mlp),
        x_(x),
        y_(y),
        warmup_(warmup),
        iters_(iters),
        graph_(graph),
        events_(2 * static_cast<size_t>(iters)) {
    ISER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (auto& event : events_) ISER_CUDA_CHECK(cudaEventCreate(&event));
  }
  ~RankTimer() {
    for (auto event : events_) cudaEventDestroy(event);
    cudaStreamDestroy(stream_);
  }
  RankTimer(const RankTimer&) = delete;
  RankTimer& operator=(const RankTimer&) = delete;

  // Median over `iters` timed calls (after `warmup`) of one rank's grouped MLP, microseconds.
  double median_us(std::span<const int32_t> rows_per_slot) {
    return medians_us(std::vector<std::span<const int32_t>>{rows_per_slot}).front();
  }

  // Medians of several configurations timed round-robin: call i of every configuration runs
  // before call i + 1 of any, so a drift of the GPU's clocks during the measurement moves every
  // configuration alike and their ratios stay comparable.
  std::vector<double> medians_us(const std::vector<std::span<const int32_t>>& configs) {
    const size_t num_configs = configs.size();
    std::vector<cudaGraphExec_t> execs(num_configs, nullptr);
    if (graph_) {
      for (size_t c = 0; c < num_configs; ++c) {
        cudaGraph_t graph = nullptr;
        ISER_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        mlp_.run(x_, configs[c], y_, stream_);
        ISER_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        ISER_CUDA_CHECK(cudaGraphInstantiate(&execs[c], graph, 0));
        cudaGraphDestroy(graph);
      }
    }
    const auto launch = [&](size_t c) {
      if (execs[c] != nullptr) {
        ISER_CUDA_CHECK(cudaGraphLaunch(execs[c], stream_));
      } else {
        mlp_.run(x_, configs[c], y_, stream_);
      }
    };
    const size_t needed = 2 * num_configs * static_cast<size_t>(iters_);
    while (events_.size() < needed) {
      events_.emplace_back();
      ISER_CUDA_CHECK(cudaEventCreate(&events_.back()));
    }
    for (int i = 0; i < warmup_; ++i) {
      for (size_t c = 0; c < num_configs; ++c) launch(c);
    }
    for (int i = 0; i < iters_; ++i) {
      for (size_t c = 0; c < num_configs; ++c) {
        const size_t e = 2 * (static_cast<size_t>(i) * num_configs + c);
        ISER_CUDA_CHECK(cudaEventRecord(events_[e], stream_));
        launch(c);
        ISER_CUDA_CHECK(cudaEventRecord(events_[e + 1], stream_));
      }
    }
    ISER_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (cudaGraphExec_t exec : execs) {
      if (exec != nullptr) cudaGraphExecDestroy(exec);
    }
    std::vector<double> medians(num_configs);
    std::vector<double> us(iters_);
    for (size_t c = 0; c < num_configs; ++c) {
      for (int i = 0; i < iters_; ++i) {
        const size_t e = 2 * (static_cast<size_t>(i) * num_configs + c);
        float ms = 0;
        ISER_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[e], events_[e + 1]));
        us[i] = 1e3 * ms;
      }
      std::sort(us.begin(), us.end());
      medians[c] = iters_ % 2 ? us[iters_ / 2] : 0.5 * (us[iters_ / 2 - 1] + us[iters_ / 2]);
    }
    return medians;
  }

 private:
  GroupedMlp& mlp_;
  const void* x_;
  void* y_;
  int warmup_, iters_;
  bool graph_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

// One configuration of the P simulated ranks: per-slot loads [P][H+S].
struct RankLoads {
  std::vector<int32_t> slots;
  std::vector<int64_t> per_rank;
};

RankLoads make_rank_loads(const Topology& topo, std::vector<int32_t> slots) {
  RankLoads loads{std::move(slots), std::vector<int64_t>(topo.num_ranks, 0)};
  const int per_rank = topo.slots_per_rank();
  for (int r = 0; r < topo.num_ranks; ++r) {
    for (int s = 0; s < per_rank; ++s) loads.per_rank[r] += loads.slots[r * per_rank + s];
  }
  return loads;
}

struct SlowestRank {
  double us = 0;
  int rank = -1;
  int num_timed = 0;
};

// Ranks of `loads` within `margin` of the largest load: the candidates for the slowest rank.
std::vector<int> candidate_ranks(const RankLoads& loads, double margin) {
  const int64_t max_load = *std::max_element(loads.per_rank.begin(), loads.per_rank.end());
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(loads.per_rank.size()); ++r) {
    if (static_cast<double>(loads.per_rank[r]) >= (1.0 - margin) * static_cast<double>(max_load)) {
      ranks.push_back(r);
    }
  }
  return ranks;
}

SlowestRank slowest_of(const std::vector<int>& ranks, std::span<const double> us) {
  SlowestRank slowest;
  for (size_t i = 0; i < ranks.size(); ++i) {
    ++slowest.num_timed;
    if (us[i] > slowest.us) slowest = {us[i], ranks[i], slowest.num_timed};
  }
  return slowest;
}

struct Cell {
  std::string routing;
  int layer = -1;  // -1: synthetic
  int tokens = 0;
  CountMatrix counts;
  RankLoads off, on;
  int num_broadcasts = 0;
  SlowestRank t_off, t_on;
  double t_bal = 0;  // balanced control, timed round-robin with this cell's OFF and ON ranks
};

double ratio_r(const RankLoads& loads) {
  return imbalance_ratio(loads.per_rank);
}

// Rows the GEMM launches compute beyond the routed rows, percent.
double padding_percent(const GroupedMlp& mlp, std::span<const int32_t> rows_per_slot) {
  int64_t rows = 0;
  for (int32_t r : rows_per_slot) rows += r;
  const int64_t padded = mlp.padded_rows(rows_per_slot);
  return rows > 0 && padded > 0 ? 100.0 * (static_cast<double>(padded) / (2.0 * rows) - 1) : 0.0;
}

// --decompose: the row granule of the pinned H200 kernels (tile 128 rows x cluster 2).
constexpr int kDecomposeGranule = 256;

// `rows` with every slot rounded to whole granules, the total kept (to the nearest granule): the
// slots rounded furthest up lose a granule, or those rounded furthest down gain one, until it is.
std::vector<int32_t> round_to_granules(std::span<const int32_t> rows, int granule) {
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  std::vector<int64_t> out(rows.size());
  int64_t granules = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    out[i] = (rows[i] + granule / 2) / granule;
    granules += out[i];
  }
  const int64_t target = (total + granule / 2) / granule;
  const auto excess = [&](size_t i) { return out[i] * granule - rows[i]; };
  for (; granules != target; granules += granules < target ? 1 : -1) {
    size_t pick = rows.size();
    for (size_t i = 0; i < rows.size(); ++i) {
      if (granules > target && out[i] == 0) continue;
      const bool better = pick == rows.size() ||
                          (granules > target ? excess(i) > excess(pick) : excess(i) < excess(pick));
      if (better) pick = i;
    }
    out[pick] += granules < target ? 1 : -1;
  }
  std::vector<int32_t> rounded(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) rounded[i] = static_cast<int32_t>(out[i] * granule);
  return rounded;
}

// --decompose: where the slowest ON rank's time over balanced goes. Timed round-robin with the
// balanced control: (a) the rank as is, (b) without its slots under one granule (fewer rows:
// compare with balanced scaled by the rows), (c) every slot rounded to whole granules at the same
// total (no tail launches, no slot under half a granule).
nlohmann::json decompose_cell(const GroupedMlp& mlp, RankTimer& timer,
                              std::span<const int32_t> on_rows, std::span<const int32_t> balanced) {
  std::vector<int32_t> no_small(on_rows.begin(), on_rows.end());
  for (int32_t& rows : no_small) rows = rows < kDecomposeGranule ? 0 : rows;
  const std::vector<int32_t> whole = round_to_granules(on_rows, kDecomposeGranule);
  const std::vector<std::span<const int32_t>> configs = {on_rows, no_small, whole, balanced};
  const std::vector<double> us = timer.medians_us(configs);
  const char* names[] = {"as_is", "no_small", "whole_granules", "balanced"};
  const auto total = [](std::span<const int32_t> rows) {
    return std::accumulate(rows.begin(), rows.end(), int64_t{0});
  };
  nlohmann::json out;
  std::string line = "#   decompose:";
  for (size_t c = 0; c < configs.size(); ++c) {
    const int64_t rows = total(configs[c]);
    const int slots = static_cast<int>(
        std::count_if(configs[c].begin(), configs[c].end(), [](int32_t r) { return r > 0; }));
    // Balanced time per row times this config's rows: the time of the same work, balanced.
    const double scaled_bal = us.back() * static_cast<double>(rows) / total(balanced);
    line += fmt::format(
        " {} {:.1f} us ({} rows, {} slots, pad {:+.1f}%, {:+.2f}% vs balanced x rows)", names[c],
        us[c], rows, slots, padding_percent(mlp, configs[c]), 100 * (us[c] / scaled_bal - 1));
    out[names[c]] = {{"us", us[c]},
                     {"rows", rows},
                     {"slots", slots},
                     {"vs_scaled_balanced_percent", 100 * (us[c] / scaled_bal - 1)}};
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
  return out;
}

struct Fit {
  double slope = 0, intercept = 0, pearson = 0;
};
Fit linear_fit(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxx = 0, syy = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  Fit fit;
  if (sxx > 0) fit.slope = sxy / sxx;
  fit.intercept = my - fit.slope * mx;
  if (sxx > 0 && syy > 0) fit.pearson = sxy / std::sqrt(sxx * syy);
  return fit;
}

// One scheduling variant timed over every cell.
// NOLINTNEXTLINE(bugprone-exception-escape): implicit members; json's move/dtor are noexcept.
struct VariantSummary {
  std::string name;
  std::vector<double> balanced_us;  // per tau: mean of the cells' balanced times
  std::vector<double> mean_on_us;   // per tau, over every cell of every routing
  std::vector<double> mean_off_us;
  nlohmann::json json;
};

// The balanced control's rows per token count (opt.tokens order), each timed once and printed.
std::vector<std::vector<int32_t>> balanced_control(const E3Options& opt, const Topology& topo,
                                                   const GroupedMlp& mlp, RankTimer& timer) {
  const int home = topo.experts_per_rank();
  const int per_rank = topo.slots_per_rank();
  // Balanced control per token count (one rank suffices): every home slot gets tau*k/H routes,
  // or (--balanced sampled) each of the tau*k routes picks a home slot uniformly.
  // NOTE: it is timed again inside every cell, round-robin with the cell's OFF and ON ranks: on
  // H200 the same balanced schedule timed at different moments ranged 8.9-11.6 ms (likely
  // clocks), so only interleaved measurements compare. The first measurement here is reported
  // and serves as warm-up.
  std::vector<std::vector<int32_t>> balanced_rows;
  for (int tokens : opt.tokens) {
    std::vector<int32_t> rows(per_rank, 0);
    const int64_t routes = int64_t{tokens} * opt.top_k;
    if (opt.balanced == "sampled") {
      trace::Xoshiro256 rng(trace::mix_seed(opt.seed, static_cast<uint64_t>(tokens), 0xba1));
      for (int64_t r = 0; r < routes; ++r) ++rows[rng.below(home)];
    } else {
      for (int s = 0; s < home; ++s) {
        rows[s] = static_cast<int32_t>(routes / home + (s < routes % home));
      }
    }
    const auto [min_rows, max_rows] = std::minmax_element(rows.begin(), rows.begin() + home);
    fmt::print(
        "# balanced ({}) tau={}: {} routes/rank, slots {}..{} rows, first {:.1f} us, padding "
        "{:+.2f}%\n",
        opt.balanced, tokens, routes, *min_rows, *max_rows, timer.median_us(rows),
        padding_percent(mlp, rows));
    balanced_rows.push_back(std::move(rows));
  }
  return balanced_rows;
}

VariantSummary time_variant(const E3Options& opt, const Topology& topo, const GroupedMlp& mlp,
                            RankTimer& timer, std::vector<Cell>& cells, bool decompose) {
  const int per_rank = topo.slots_per_rank();
  VariantSummary summary;
  const std::vector<std::vector<int32_t>> balanced_rows = balanced_control(opt, topo, mlp, timer);

  fmt::print("{:<9} {:>5} {:>6} {:>6} {:>6} {:>4} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7} {:>6}\n",
             "routing", "layer", "tau", "R_off", "R_on", "bcst", "off_us", "on_us", "bal_us",
             "on/bal", "off/on", "on_pad", "timed");
  nlohmann::json json_cells = nlohmann::json::array();
  for (Cell& cell : cells) {
    const size_t tau_idx =
        std::find(opt.tokens.begin(), opt.tokens.end(), cell.tokens) - opt.tokens.begin();
    // OFF ranks, ON ranks and the balanced control, timed round-robin in one measurement.
    const std::vector<int> off_ranks = candidate_ranks(cell.off, opt.margin);
    const std::vector<int> on_ranks = candidate_ranks(cell.on, opt.margin);
    std::vector<std::span<const int32_t>> configs;
    configs.reserve(off_ranks.size() + on_ranks.size() + 1);
    for (const int r : off_ranks) {
      configs.push_back(std::span<const int32_t>(cell.off.slots)
                            .subspan(static_cast<size_t>(r) * per_rank, per_rank));
    }
    for (const int r : on_ranks) {
      configs.push_back(std::span<const int32_t>(cell.on.slots)
                            .subspan(static_cast<size_t>(r) * per_rank, per_rank));
    }
    configs.push_back(balanced_rows[tau_idx]);
    const std::vector<double> us = timer.medians_us(configs);
    const std::span<const double> all(us);
    cell.t_off = slowest_of(off_ranks, all.subspan(0, off_ranks.size()));
    cell.t_on = slowest_of(on_ranks, all.subspan(off_ranks.size(), on_ranks.size()));
    cell.t_bal = us.back();
    const double bal = cell.t_bal;
    const std::span<const int32_t> on_rows =
        std::span<const int32_t>(cell.on.slots)
            .subspan(static_cast<size_t>(cell.t_on.rank) * per_rank, per_rank);
    const double on_pad = padding_percent(mlp, on_rows);
    // The shape of the slowest ON rank's work: slots that stream their weights for few rows.
    int small_slots = 0, empty_slots = 0, max_slot_rows = 0;
    for (const int32_t rows : on_rows) {
      empty_slots += rows == 0;
      small_slots += rows > 0 && rows < 256;
      max_slot_rows = std::max<int>(max_slot_rows, rows);
    }
    fmt::print(
        "{:<9} {:>5} {:>6} {:>6.3f} {:>6.3f} {:>4} {:>10.1f} {:>10.1f} {:>10.1f} {:>+7.2f}% "
        "{:>7.3f}x {:>+6.1f}% {:>3}/{}\n",
        cell.routing, cell.layer < 0 ? std::string("-") : std::to_string(cell.layer), cell.tokens,
        ratio_r(cell.off), ratio_r(cell.on), cell.num_broadcasts, cell.t_off.us, cell.t_on.us, bal,
        100 * (cell.t_on.us / bal - 1), cell.t_off.us / cell.t_on.us, on_pad, cell.t_off.num_timed,
        cell.t_on.num_timed);
    std::fflush(stdout);
    json_cells.push_back({{"routing", cell.routing},
                          {"layer", cell.layer},
                          {"tokens_per_rank", cell.tokens},
                          {"r_off", ratio_r(cell.off)},
                          {"r_on", ratio_r(cell.on)},
                          {"broadcasts", cell.num_broadcasts},
                          {"off_us", cell.t_off.us},
                          {"on_us", cell.t_on.us},
                          {"balanced_us", bal},
                          {"on_padding_percent", on_pad},
                          {"on_slots_under_256_rows", small_slots},
                          {"on_empty_slots", empty_slots},
                          {"on_max_slot_rows", max_slot_rows},
                          {"slowest_rank_off", cell.t_off.rank},
                          {"slowest_rank_on", cell.t_on.rank}});
    if (decompose) {
      json_cells.back()["decompose"] = decompose_cell(mlp, timer, on_rows, balanced_rows[tau_idx]);
    }
  }

  // Means per (routing, tau) and the OFF-time fit in R (trace layers).
  nlohmann::json json_summary = nlohmann::json::array();
  const auto mean = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  for (size_t tau_idx = 0; tau_idx < opt.tokens.size(); ++tau_idx) {
    std::vector<double> all_on, all_off, all_bal;
    for (const std::string& routing : opt.routings) {
      std::vector<double> r_off, off, on, bals;
      for (const Cell& cell : cells) {
        if (cell.tokens != opt.tokens[tau_idx]) continue;
        if (cell.routing != routing) continue;
        r_off.push_back(ratio_r(cell.off));
        off.push_back(cell.t_off.us);
        on.push_back(cell.t_on.us);
        bals.push_back(cell.t_bal);
      }
      if (off.empty()) continue;
      all_on.insert(all_on.end(), on.begin(), on.end());
      all_off.insert(all_off.end(), off.begin(), off.end());
      all_bal.insert(all_bal.end(), bals.begin(), bals.end());
      const double bal = mean(bals);
      const Fit fit_off = linear_fit(r_off, off);
      const Fit fit_on = linear_fit(r_off, on);
      fmt::print(
          "# mean {} tau={} ({} cells): R_off {:.3f} | OFF {:.1f} us, ON {:.1f} us, "
          "balanced {:.1f} us | ON vs balanced {:+.2f}% | OFF/ON {:.3f}x",
          routing, opt.tokens[tau_idx], off.size(), mean(r_off), mean(off), mean(on), bal,
          100 * (mean(on) / bal - 1), mean(off) / mean(on));
      if (off.size() >= 3) {
        fmt::print(" | OFF = {:.1f} + {:.1f}*R us (Pearson {:.3f}); Pearson(ON, R_off) {:.3f}",
                   fit_off.intercept, fit_off.slope, fit_off.pearson, fit_on.pearson);
      }
      fmt::print("\n");
      json_summary.push_back({{"routing", routing},
                              {"tokens_per_rank", opt.tokens[tau_idx]},
                              {"cells", off.size()},
                              {"mean_r_off", mean(r_off)},
                              {"mean_off_us", mean(off)},
                              {"mean_on_us", mean(on)},
                              {"balanced_us", bal},
                              {"off_fit_slope_us_per_r", fit_off.slope},
                              {"off_fit_intercept_us", fit_off.intercept},
                              {"off_fit_pearson", fit_off.pearson},
                              {"on_pearson_r_off", fit_on.pearson}});
    }
    summary.balanced_us.push_back(all_bal.empty() ? 0.0 : mean(all_bal));
    summary.mean_on_us.push_back(all_on.empty() ? 0.0 : mean(all_on));
    summary.mean_off_us.push_back(all_off.empty() ? 0.0 : mean(all_off));
  }
  summary.json = {
      {"balanced_us", summary.balanced_us}, {"cells", json_cells}, {"summary", json_summary}};
  return summary;
}

int run(const E3Options& opt) {
  const Topology topo = Topology::make(opt.num_ranks, opt.num_experts, opt.num_slots);
  opt.shape.check();
  ISER_CHECK(opt.iters >= 1 && opt.warmup >= 0, "-n {} / -w {}: need n >= 1, w >= 0", opt.iters,
             opt.warmup);
  const int home = topo.experts_per_rank();
  const int per_rank = topo.slots_per_rank();
  ISER_CHECK(opt.balanced == "exact" || opt.balanced == "sampled",
             "--balanced '{}': expected exact or sampled", opt.balanced);
  ISER_CHECK(opt.gemm == "lt" || opt.gemm == "grouped", "--gemm '{}': expected lt or grouped",
             opt.gemm);
  const GemmBackend backend = opt.gemm == "lt" ? GemmBackend::kLtPinned : GemmBackend::kGrouped;
  std::vector<Variant> variants;
  for (const std::string& spec : opt.variants) variants.push_back(parse_variant(spec, backend));
  if (variants.empty()) {
    GroupedMlpOptions defaults;
    defaults.backend = backend;
    variants.push_back({"default", defaults});
  }

  // 1. Plan every cell on the host (routing, OFF, ON).
  std::vector<Cell> cells;
  std::unique_ptr<RoutingSource> trace;
  for (const std::string& routing : opt.routings) {
    ISER_CHECK(routing == "power-law" || routing == "trace",
               "--routing '{}': expected power-law or trace", routing);
    if (routing == "trace") {
      trace = open_bench_trace(opt.trace_path, opt.num_experts, opt.top_k);
    }
  }
  SyntheticOptions synthetic;
  synthetic.kind = "power-law";
  synthetic.num_experts = opt.num_experts;
  synthetic.top_k = opt.top_k;
  synthetic.num_layers = 1;
  synthetic.alpha = opt.alpha;
  synthetic.seed = opt.seed;
  const std::unique_ptr<RoutingSource> power_law = make_synthetic(synthetic);
  for (int tokens : opt.tokens) {
    ISER_CHECK(tokens > 0, "--tokens {}: must be positive", tokens);
    for (const std::string& routing : opt.routings) {
      const std::vector<int> layers = routing == "trace"
                                          ? parse_layers(opt.layers, trace->metadata().num_layers)
                                          : std::vector<int>{-1};
      for (int layer : layers) {
        Cell cell;
        cell.routing = routing;
        cell.layer = layer;
        cell.tokens = tokens;
        cell.counts = layer < 0 ? power_law->counts(0, 0, opt.num_ranks, tokens)
                                : trace->counts(layer, 0, opt.num_ranks, tokens);
        cell.off = make_rank_loads(
            topo, slot_loads(topo, cell.counts, make_empty_plan(topo, cell.counts)));
        auto policy = make_policy(opt.policy, topo);
        const PolicyResult result = policy->plan(cell.counts);
        cell.num_broadcasts = static_cast<int>(result.plan.broadcasts.size());
        cell.on = make_rank_loads(topo, slot_loads(topo, cell.counts, result.plan));
        cells.push_back(std::move(cell));
      }
    }
  }

  // 2. Device buffers sized for the largest rank load.
  int64_t max_rows = 0;
  for (const Cell& cell : cells) {
    for (const RankLoads* loads : {&cell.off, &cell.on}) {
      max_rows =
          std::max(max_rows, *std::max_element(loads->per_rank.begin(), loads->per_rank.end()));
    }
  }
  for (int tokens : opt.tokens) max_rows = std::max<int64_t>(max_rows, int64_t{tokens} * opt.top_k);
  int device = 0;
  cudaDeviceProp prop{};
  ISER_CUDA_CHECK(cudaGetDevice(&device));
  ISER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  fmt::print(
      "# E3 analogue: {} | EP{} simulated, E={} top-{} H={} S={} | expert {}x{} bf16 | "
      "policy {} | median of {} (warm-up {}){} | ranks timed: load >= {:.0f}% of max\n",
      prop.name, opt.num_ranks, opt.num_experts, opt.top_k, home, opt.num_slots, opt.shape.hidden,
      opt.shape.intermediate, opt.policy, opt.iters, opt.warmup, opt.graph ? " | CUDA graph" : "",
      100 * (1 - opt.margin));
  std::fflush(stdout);

  ExpertBank bank(opt.shape, per_rank);
  DeviceBuffer x(static_cast<size_t>(max_rows) * opt.shape.hidden * 2);
  DeviceBuffer y(static_cast<size_t>(max_rows) * opt.shape.hidden * 2);
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(opt.shape.hidden));
  bank.fill_random(opt.seed, weight_scale, nullptr);
  cuda::launch_fill_uniform(
      {x.get<uint16_t>(), max_rows * opt.shape.hidden, opt.seed ^ 0x5eed, 1.0f}, nullptr);
  std::vector<SlotWeights> weights(per_rank);
  for (int s = 0; s < per_rank; ++s) weights[s] = bank.slot(s);

  nlohmann::json json_variants = nlohmann::json::array();
  std::vector<VariantSummary> summaries;
  for (const Variant& variant : variants) {
    GroupedMlp mlp(opt.shape, per_rank, max_rows, variant.options);
    mlp.set_weights(weights, nullptr);
    ISER_CUDA_CHECK(cudaDeviceSynchronize());
    const bool graph = opt.graph || variant.graph;
    fmt::print("# variant {}: {}{}\n", variant.name, mlp.describe(), graph ? " | CUDA graph" : "");
    RankTimer timer(mlp, x.get(), y.get(), opt.warmup, opt.iters, graph);
    std::vector<Cell> timed = cells;
    const bool decompose = opt.decompose && summaries.empty();
    summaries.push_back(time_variant(opt, topo, mlp, timer, timed, decompose));
    summaries.back().name = variant.name;
    json_variants.push_back(summaries.back().json);
    json_variants.back()["variant"] = variant.name;
    json_variants.back()["gemm"] = mlp.describe();
    json_variants.back()["graph"] = graph;
  }

  // 6. Across variants: the fair baseline is the fastest balanced time of any variant.
  if (summaries.size() > 1) {
    for (size_t tau_idx = 0; tau_idx < opt.tokens.size(); ++tau_idx) {
      double best_bal = summaries[0].balanced_us[tau_idx];
      for (const VariantSummary& v : summaries) {
        best_bal = std::min(best_bal, v.balanced_us[tau_idx]);
      }
      fmt::print("# variants tau={}: best balanced {:.1f} us\n", opt.tokens[tau_idx], best_bal);
      for (const VariantSummary& v : summaries) {
        fmt::print(
            "#   {:<10} balanced {:>9.1f} us | mean ON {:>9.1f} us ({:+.2f}% vs best balanced) | "
            "mean OFF {:>9.1f} us | OFF/ON {:.3f}x\n",
            v.name, v.balanced_us[tau_idx], v.mean_on_us[tau_idx],
            100 * (v.mean_on_us[tau_idx] / best_bal - 1), v.mean_off_us[tau_idx],
            v.mean_off_us[tau_idx] / v.mean_on_us[tau_idx]);
      }
    }
  }
  if (!opt.json_path.empty()) {
    std::ofstream out(opt.json_path);
    ISER_CHECK(out.good(), "-J {}: cannot write", opt.json_path);
    out << nlohmann::json{{"device", prop.name},
                          {"ranks", opt.num_ranks},
                          {"experts", opt.num_experts},
                          {"slots", opt.num_slots},
                          {"top_k", opt.top_k},
                          {"hidden", opt.shape.hidden},
                          {"intermediate", opt.shape.intermediate},
                          {"iters", opt.iters},
                          {"graph", opt.graph},
                          {"variants", json_variants}}
               .dump(1)
        << "\n";
  }
  return 0;
}

}  // namespace

int e3_main(const std::vector<std::string>& args) {
  E3Options opt;
  CLI::App app{"E3 analogue: slowest-rank grouped-MLP time OFF / ON / balanced (one GPU)"};
  app.add_option("--routing", opt.routings, "power-law and/or trace")->delimiter(',');
  app.add_option("-t,--tokens", opt.tokens, "tokens per rank (tau), comma list")->delimiter(',');
  app.add_option("--trace", opt.trace_path, "routing trace (any iser format; default: bundled)");
  app.add_option("--layers", opt.layers, "trace layers: first:last:step or comma list");
  app.add_option("--alpha", opt.alpha, "power-law exponent");
  app.add_option("-P,--ranks", opt.num_ranks, "EP degree simulated");
  app.add_option("-E,--experts", opt.num_experts, "routed experts");
  app.add_option("-S,--slots", opt.num_slots, "helper slots per rank");
  app.add_option("-k,--top-k", opt.top_k, "experts per token");
  app.add_option("--hidden", opt.shape.hidden, "expert hidden size He");
  app.add_option("--intermediate", opt.shape.intermediate, "expert intermediate size I");
  app.add_option("--policy", opt.policy, "plan policy for ON");
  app.add_option("-w,--warmup", opt.warmup, "warm-up calls per timed rank");
  app.add_option("-n,--iters", opt.iters, "timed calls per rank (median)");
  app.add_option("--margin", opt.margin, "time ranks with load >= (1 - margin) * max");
  app.add_option("--seed", opt.seed, "power-law / weight seed");
  app.add_flag("-G,--graph", opt.graph, "time CUDA-graph launches of the captured call");
  app.add_option("--gemm", opt.gemm, "lt (cublasLt, pinned algorithm) or grouped (cuBLAS grouped)");
  app.add_option("--variants", opt.variants,
                 "lt scheduling variants to time in turn, comma list of "
                 "lanes:chain:tails[:option...] (e.g. 4:0:off,4:1:64,8:1:8:p256,8:1:8:g; "
                 "tails: off or the smallest tail granule; options: p<rows> slots under <rows> on "
                 "high-priority lanes, g CUDA-graph timing)")
      ->delimiter(',');
  app.add_option("--balanced", opt.balanced,
                 "balanced control: sampled (default: each route picks a home slot uniformly) "
                 "or exact (tau*k/H rows per home slot)");
  app.add_flag("--decompose", opt.decompose,
               "first variant: time the slowest ON rank as is, without slots under 256 rows and "
               "rounded to 256-row granules, round-robin with balanced");
  app.add_option("-J,--json", opt.json_path, "write results as JSON");
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
    return run(opt);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench moe e3: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace iser::moe
