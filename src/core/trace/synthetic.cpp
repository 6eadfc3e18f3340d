// Synthetic generators: `power-law` (Zipf histograms + the sampling rule, optional tuning to a
// target rank imbalance) and `mixed` (a stream of requests from drifting workloads).
#include "synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common.h"
#include "iser/error.h"
#include "sampler.h"
#include "sources.h"
#include "synthetic_families.h"

namespace iser::trace {
namespace {

// Stream tags keep the generators' random streams apart from each other and from sampling.
constexpr uint64_t kPermutationTag = 0x7065726d;  // "perm"
constexpr uint64_t kTuningTag = 0x74756e65;       // "tune"
constexpr double kWeightScale = 1 << 30;

void check_options(const SyntheticOptions& o) {
  ISER_CHECK(o.num_experts >= 1 && o.num_experts <= kMaxTraceExperts,
             "synthetic: num_experts = {} out of range [1, {}]", o.num_experts, kMaxTraceExperts);
  ISER_CHECK(o.top_k >= 1 && o.top_k <= std::min(o.num_experts, kMaxTraceTopK),
             "synthetic: top_k = {} out of range [1, min(E, {})]", o.top_k, kMaxTraceTopK);
  ISER_CHECK(o.num_layers >= 1 && o.num_layers <= kMaxTraceLayers,
             "synthetic: num_layers = {} out of range [1, {}]", o.num_layers, kMaxTraceLayers);
  ISER_CHECK(std::isfinite(o.alpha) && o.alpha >= 0 && o.alpha <= 8,
             "synthetic: alpha = {} out of range [0, 8]", o.alpha);
}

void zipf_into(std::span<int64_t> out, double alpha, Xoshiro256& rng, double scale) {
  const auto order = shuffled_order(static_cast<int>(out.size()), rng);
  for (size_t i = 0; i < out.size(); ++i) {
    const double w = scale * std::pow(static_cast<double>(i + 1), -alpha);
    out[order[i]] += std::max<int64_t>(1, std::llround(w));
  }
}

TraceMetadata synthetic_metadata(const SyntheticOptions& o, std::string dataset) {
  TraceMetadata m;
  m.model = "synthetic";
  m.dataset = std::move(dataset);
  m.source = fmt::format("synthetic:{} (E = {}, k = {}, L = {}, seed = {})", o.kind, o.num_experts,
                         o.top_k, o.num_layers, o.seed);
  m.num_experts = o.num_experts;
  m.top_k = o.top_k;
  m.num_layers = o.num_layers;
  return m;
}

}  // namespace

std::vector<int32_t> shuffled_order(int n, Xoshiro256& rng) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[i] = i;
  for (int i = n - 1; i > 0; --i) std::swap(p[i], p[rng.below(static_cast<uint64_t>(i) + 1)]);
  return p;
}

std::vector<int64_t> power_law_histograms(int num_layers, int num_experts, double alpha,
                                          uint64_t seed) {
  std::vector<int64_t> hist(static_cast<size_t>(num_layers) * num_experts, 0);
  for (int l = 0; l < num_layers; ++l) {
    Xoshiro256 rng(mix_seed(seed, kPermutationTag, static_cast<uint64_t>(l)));
    zipf_into(std::span<int64_t>(hist).subspan(static_cast<size_t>(l) * num_experts, num_experts),
              alpha, rng, kWeightScale);
  }
  return hist;
}

double power_law_rank_imbalance(const SyntheticOptions& options, double alpha) {
  const int P = options.rank_imbalance_ep;
  ISER_CHECK(P >= 1 && options.num_experts % P == 0,
             "synthetic: rank_imbalance_ep = {} must divide num_experts = {}", P,
             options.num_experts);
  const auto hist =
      power_law_histograms(options.num_layers, options.num_experts, alpha, options.seed);
  const auto E = static_cast<size_t>(options.num_experts);
  double sum = 0;
  std::vector<int32_t> counts(E);
  std::vector<int64_t> wide(E);
  for (int l = 0; l < options.num_layers; ++l) {
    const ExpertSampler sampler(std::span<const int64_t>(hist).subspan(l * E, E), options.top_k);
    Xoshiro256 rng(mix_seed(options.seed, kTuningTag, static_cast<uint64_t>(l)));
    std::fill(counts.begin(), counts.end(), 0);
    sampler.sample_counts(rng, kTuningTokens, counts.data());
    std::copy(counts.begin(), counts.end(), wide.begin());
    sum += histogram_rank_imbalance(wide, P);
  }
  return sum / options.num_layers;
}

}  // namespace iser::trace

namespace iser {

double synthetic_alpha(const SyntheticOptions& options) {
  trace::check_options(options);
  if (!options.rank_imbalance) return options.alpha;
  const double target = *options.rank_imbalance;
  ISER_CHECK(std::isfinite(target) && target >= 1.0,
             "synthetic: rank_imbalance = {} must be a number >= 1", target);
  // Deterministic search: R grows with alpha (common random numbers for every alpha, so the
  // measurement is smooth in alpha). Double the upper end from 1 until it reaches the target
  // (at most 8), then 20 halvings give alpha to better than 1e-5.
  double lo = 0.0;
  double hi = 1.0;
  while (trace::power_law_rank_imbalance(options, hi) < target) {
    ISER_CHECK(hi < 8.0,
               "synthetic: rank_imbalance = {} unreachable at EP{} with E = {}, k = {} (alpha = "
               "{} gives {:.3f})",
               target, options.rank_imbalance_ep, options.num_experts, options.top_k, hi,
               trace::power_law_rank_imbalance(options, hi));
    lo = hi;
    hi *= 2;
  }
  for (int step = 0; step < 20; ++step) {
    const double mid = 0.5 * (lo + hi);
    (trace::power_law_rank_imbalance(options, mid) < target ? lo : hi) = mid;
  }
  return hi;
}

std::unique_ptr<RoutingSource> make_synthetic(const SyntheticOptions& options) {
  trace::check_options(options);
  if (options.kind == "mixed") {
    ISER_CHECK(!options.rank_imbalance,
               "synthetic: rank_imbalance tunes the power-law generator, not '{}'", options.kind);
    return trace::make_mixed(options, trace::MixedParams{});
  }
  if (trace::is_skew_family(options.kind)) return trace::make_skew_family(options);
  ISER_CHECK(options.kind == "power-law", "synthetic: unknown kind '{}' (power-law | mixed | {})",
             options.kind, fmt::join(trace::skew_family_names(), " | "));
  const double alpha = synthetic_alpha(options);
  TraceData data;
  data.kind = TraceKind::kHistograms;
  data.metadata = trace::synthetic_metadata(
      options, options.rank_imbalance
                   ? fmt::format("power-law(alpha={:.6f}, tuned to R={} at EP{})", alpha,
                                 *options.rank_imbalance, options.rank_imbalance_ep)
                   : fmt::format("power-law(alpha={})", alpha));
  data.categories.emplace_back();
  data.histograms.push_back(
      trace::power_law_histograms(options.num_layers, options.num_experts, alpha, options.seed));
  TraceOptions trace_options;
  trace_options.seed = options.seed;
  return make_routing_source(std::move(data), trace_options);
}

}  // namespace iser
