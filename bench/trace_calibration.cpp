// Prints the calibration of the synthetic generators against docs/design.md §8 (docs/data.md):
// whole-trace mean R at EP8, per-iteration mean R at tau = 8192 for EP4/8/16/24, and the share
// of a layer's routes taken by its top-4 experts.
//
//   build/bench/trace_calibration [kind=mixed|power-law|bundled|tune] [layers=8] [iters=16]
//                                 [whole_iters=256] [seed=1] [alpha=..] [mixed knobs: workloads=,
//                                 base_alpha=, workload_alpha=, share=, drift=, period=]
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "core/trace/synthetic.h"
#include "iser/trace.h"

namespace {

double top4_share(const std::vector<int64_t>& hist) {
  auto sorted = hist;
  std::sort(sorted.rbegin(), sorted.rend());
  int64_t total = 0;
  for (const int64_t v : hist) total += v;
  return total == 0 ? 0.0
                    : static_cast<double>(sorted[0] + sorted[1] + sorted[2] + sorted[3]) /
                          static_cast<double>(total);
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos) {
      fmt::print(stderr, "usage: trace_calibration key=value ...\n");
      return 2;
    }
    args[a.substr(0, eq)] = a.substr(eq + 1);
  }
  const auto get = [&](const char* key, const std::string& dflt) {
    const auto it = args.find(key);
    return it == args.end() ? dflt : it->second;
  };
  const std::string kind = get("kind", "mixed");
  const int iters = std::stoi(get("iters", "16"));
  const int whole_iters = std::stoi(get("whole_iters", "256"));
  constexpr int kTau = 8192;

  iser::SyntheticOptions so;
  so.kind = kind;
  so.num_layers = std::stoi(get("layers", "8"));
  so.seed = std::stoull(get("seed", "1"));
  so.alpha = std::stod(get("alpha", "0.8"));
  iser::trace::MixedParams mp;
  mp.num_workloads = std::stoi(get("workloads", std::to_string(mp.num_workloads)));
  mp.base_alpha = std::stod(get("base_alpha", std::to_string(mp.base_alpha)));
  mp.workload_alpha = std::stod(get("workload_alpha", std::to_string(mp.workload_alpha)));
  mp.workload_share = std::stod(get("share", std::to_string(mp.workload_share)));
  mp.head_offset = std::stod(get("offset", std::to_string(mp.head_offset)));
  mp.cutoff = std::stod(get("cutoff", std::to_string(mp.cutoff)));
  mp.drift_amplitude = std::stod(get("drift", std::to_string(mp.drift_amplitude)));
  mp.drift_period = std::stoll(get("period", std::to_string(mp.drift_period)));

  if (kind == "tune") {
    // EP64 heavy skew (docs/evaluation.md): power-law tuned to a whole-set rank imbalance at EP64,
    // E = 256, top-8.
    so.kind = "power-law";
    so.num_experts = std::stoi(get("experts", "256"));
    so.top_k = std::stoi(get("top_k", "8"));
    so.rank_imbalance_ep = std::stoi(get("ep", "64"));
    for (const double target : {1.5, 2.0, 3.0}) {
      so.rank_imbalance = target;
      const double alpha = iser::synthetic_alpha(so);
      fmt::print(
          "target R = {:.1f} at EP{} (E = {}, top-{}, {} layers): alpha = {:.6f}, measured "
          "R = {:.4f}\n",
          target, so.rank_imbalance_ep, so.num_experts, so.top_k, so.num_layers, alpha,
          iser::trace::power_law_rank_imbalance(so, alpha));
    }
    return 0;
  }
  std::unique_ptr<iser::RoutingSource> source;
  if (kind == "mixed") {
    source = iser::trace::make_mixed(so, mp);
  } else if (kind == "bundled") {
    source = iser::open_trace(iser::bundled_default_trace());
  } else {
    source = iser::make_synthetic(so);
  }
  const auto& meta = source->metadata();
  const int L = meta.num_layers;
  const int E = meta.num_experts;
  fmt::print("source: {} | {} layers, E = {}, top-{}\n", meta.source, L, E, meta.top_k);

  // Whole trace at EP8: counts summed over whole_iters consecutive iterations.
  double whole_r = 0;
  double top4 = 0;
  for (int l = 0; l < L; ++l) {
    std::vector<int64_t> hist(E, 0);
    for (int i = 0; i < whole_iters; ++i) {
      const auto h = source->counts(l, i, 8, kTau).histogram();
      for (int e = 0; e < E; ++e) hist[e] += h[e];
    }
    whole_r += iser::histogram_rank_imbalance(hist, 8);
    top4 += top4_share(hist);
  }
  fmt::print(
      "whole-trace EP8 mean R = {:.3f} over {} iterations x {} tokens; top-4 share = "
      "{:.1f}%\n",
      whole_r / L, whole_iters, 8 * kTau, 100 * top4 / L);
  // Per-iteration mean R at tau = 8192, iterations spread over the whole-trace span.
  fmt::print("per-iteration mean R (tau = {}, {} iterations x {} layers):", kTau, iters, L);
  for (const int P : {4, 8, 16, 24}) {
    const int64_t span_iters = std::max<int64_t>(1, int64_t{whole_iters} * 8 / P);
    double sum = 0;
    for (int l = 0; l < L; ++l) {
      for (int j = 0; j < iters; ++j) {
        const int64_t i = j * span_iters / iters;
        sum += iser::histogram_rank_imbalance(source->counts(l, i, P, kTau).histogram(), P);
      }
    }
    fmt::print("  EP{} {:.3f}", P, sum / (L * iters));
  }
  fmt::print("\n");
  return 0;
}
