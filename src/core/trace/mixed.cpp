// The `mixed` generator: a token stream of requests, each from one of W workloads whose mixture
// drifts over time. Layer l of workload w routes with
//   p_{w,l} = (1 - beta) * Zipf(base_alpha) over the layer's shared expert order
//           + beta * Zipf(workload_alpha) over the workload's own expert order,
// (Zipf-Mandelbrot weights: rank i gets (i + 1 + q)^-alpha * exp(-i / cutoff)),
// and a request of the stream picks its workload with probability proportional to
// exp(A * sin(2 pi x / period + phi_w)) at its token position x. The stream is cut into
// independently seeded blocks of kBlock tokens (requests do not cross blocks), so any iteration
// can be produced without generating the ones before it. Iterations follow the batching rule.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "common.h"
#include "iser/error.h"
#include "sampler.h"
#include "sources.h"
#include "synthetic.h"

namespace iser::trace {
namespace {

constexpr uint64_t kPermutationTag = 0x6d706572;  // "mper"
constexpr uint64_t kPhaseTag = 0x70686173;        // "phas"
constexpr uint64_t kRequestTag = 0x72657173;      // "reqs"
constexpr uint64_t kRouteTag = 0x726f7574;        // "rout"
constexpr int64_t kBlock = 2048;
constexpr double kTotalWeight = 0x1.0p40;

std::vector<double> zipf_shares(int n, double alpha, double offset, double cutoff, uint64_t seed) {
  Xoshiro256 rng(seed);
  const auto order = shuffled_order(n, rng);
  std::vector<double> shares(static_cast<size_t>(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    shares[order[i]] = std::pow(i + 1 + offset, -alpha) * std::exp(-i / cutoff);
    sum += shares[order[i]];
  }
  for (double& s : shares) s /= sum;
  return shares;
}

class MixedSource final : public RoutingSource {
 public:
  MixedSource(const SyntheticOptions& o, const MixedParams& p) : params_(p), seed_(o.seed) {
    ISER_CHECK(p.num_workloads >= 1 && p.num_workloads <= 256 && p.workload_share >= 0 &&
                   p.workload_share <= 1 && p.min_request >= 1 && p.max_request >= p.min_request &&
                   p.drift_period > 0,
               "synthetic mixed: invalid parameters");
    meta_.model = "synthetic";
    meta_.dataset = "mixed";
    meta_.source = fmt::format("synthetic:mixed (E = {}, k = {}, L = {}, seed = {})", o.num_experts,
                               o.top_k, o.num_layers, o.seed);
    meta_.num_experts = o.num_experts;
    meta_.top_k = o.top_k;
    meta_.num_layers = o.num_layers;
    const int W = p.num_workloads;
    const int E = o.num_experts;
    std::vector<int64_t> weights(static_cast<size_t>(E));
    for (int l = 0; l < o.num_layers; ++l) {
      const auto base = zipf_shares(E, p.base_alpha, p.head_offset, p.cutoff,
                                    mix_seed(seed_, kPermutationTag, l, W));
      for (int w = 0; w < W; ++w) {
        const auto own = zipf_shares(E, p.workload_alpha, p.head_offset, p.cutoff,
                                     mix_seed(seed_, kPermutationTag, l, w));
        for (int e = 0; e < E; ++e) {
          const double share = (1 - p.workload_share) * base[e] + p.workload_share * own[e];
          weights[e] = std::max<int64_t>(1, std::llround(kTotalWeight * share));
        }
        samplers_.emplace_back(weights, o.top_k);  // index l * W + w
      }
    }
    Xoshiro256 rng(mix_seed(seed_, kPhaseTag));
    for (int w = 0; w < W; ++w) {
      phases_.push_back(2 * std::numbers::pi * (static_cast<double>(w) / W + rng.uniform()));
    }
  }

  const TraceMetadata& metadata() const override { return meta_; }
  std::optional<int64_t> num_iterations(int, int) const override { return std::nullopt; }

  std::vector<int32_t> tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                              int tokens_per_rank) const override {
    check(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    const int64_t batch = static_cast<int64_t>(num_ranks) * tokens_per_rank;
    const int k = meta_.top_k;
    std::vector<int32_t> ids(static_cast<size_t>(batch * k));
    generate(layer_idx, iteration_idx * batch, batch, [&](int64_t t, const int32_t* choice) {
      std::copy_n(choice, k, ids.begin() + t * k);
    });
    return ids;
  }

  CountMatrix counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                     int tokens_per_rank) const override {
    check(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    const int64_t batch = static_cast<int64_t>(num_ranks) * tokens_per_rank;
    CountMatrix counts(num_ranks, meta_.num_experts);
    const int k = meta_.top_k;
    generate(layer_idx, iteration_idx * batch, batch, [&](int64_t t, const int32_t* choice) {
      int32_t* row = counts.row(static_cast<int>(t / tokens_per_rank)).data();
      for (int c = 0; c < k; ++c) {
        if (choice[c] >= 0) ++row[choice[c]];
      }
    });
    return counts;
  }

 private:
  void check(int layer_idx, int64_t iteration_idx, int num_ranks, int tokens_per_rank) const {
    check_invocation(meta_, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    ISER_CHECK(iteration_idx <= (int64_t{1} << 40) / (static_cast<int64_t>(num_ranks) *
                                                      std::max(tokens_per_rank, 1)),
               "synthetic mixed: iteration {} beyond the 2^40-token stream", iteration_idx);
  }

  int draw_workload(Xoshiro256& rng, int64_t position) const {
    const int W = params_.num_workloads;
    double logits[256];
    double sum = 0;
    const double angle = 2 * std::numbers::pi *
                         static_cast<double>(position % params_.drift_period) /
                         static_cast<double>(params_.drift_period);
    for (int w = 0; w < W; ++w) {
      logits[w] = std::exp(params_.drift_amplitude * std::sin(angle + phases_[w]));
      sum += logits[w];
    }
    double u = rng.uniform() * sum;
    for (int w = 0; w < W - 1; ++w) {
      if (u < logits[w]) return w;
      u -= logits[w];
    }
    return W - 1;
  }

  // Calls emit(t, ids) for tokens first..first+count-1 (t relative to first), block by block.
  template <typename Emit>
  void generate(int layer_idx, int64_t first, int64_t count, Emit&& emit) const {
    const int W = params_.num_workloads;
    std::vector<uint8_t> workload(kBlock);
    int32_t choice[ExpertSampler::kMaxTopK];
    for (int64_t block = first / kBlock; block * kBlock < first + count; ++block) {
      const int64_t start = block * kBlock;
      Xoshiro256 req_rng(mix_seed(seed_, kRequestTag, static_cast<uint64_t>(block)));
      for (int64_t t = 0; t < kBlock;) {
        const int64_t len =
            params_.min_request +
            static_cast<int64_t>(req_rng.below(static_cast<uint64_t>(params_.max_request) -
                                               static_cast<uint64_t>(params_.min_request) + 1));
        const auto w = static_cast<uint8_t>(draw_workload(req_rng, start + t));
        for (const int64_t end = std::min(kBlock, t + len); t < end; ++t) workload[t] = w;
      }
      Xoshiro256 rng(mix_seed(seed_, kRouteTag, static_cast<uint64_t>(layer_idx),
                              static_cast<uint64_t>(block)));
      // Tokens before `first` in this block are drawn too: the block's stream is sequential.
      const int64_t stop = std::min(kBlock, first + count - start);
      for (int64_t t = 0; t < stop; ++t) {
        samplers_[static_cast<size_t>(layer_idx) * W + workload[t]].draw_token(rng, choice);
        if (start + t >= first) emit(start + t - first, choice);
      }
    }
  }

  MixedParams params_;
  uint64_t seed_;
  TraceMetadata meta_;
  std::vector<ExpertSampler> samplers_;
  std::vector<double> phases_;
};

}  // namespace

std::unique_ptr<RoutingSource> make_mixed(const SyntheticOptions& options,
                                          const MixedParams& params) {
  return std::make_unique<MixedSource>(options, params);
}

}  // namespace iser::trace
