// The skew families: named synthetic generators, each one shape of imbalance a balancing policy
// must handle (docs/evaluation.md lists them with their measured statistics).
//
//   zipf-A            Zipf exponent A over experts (any A in (0, 4]; zipf-0.6 ... zipf-1.5 are the
//                     documented members), a seeded random expert order per layer, the same
//                     distribution every iteration.
//   hot-ranks         Zipf 1.0 whose 2c hottest experts sit two per rank on c = max(1, P/16)
//                     seeded ranks (hot experts concentrated on a few ranks).
//   hot-spread        Zipf 1.0 whose min(P, E) hottest experts sit one per rank (spread).
//   rank-skew         source ranks differ: a seeded quarter of the ranks route tau tokens, the
//                     others tau/2, and each source rank mixes the layer's Zipf 1.0 (half) with a
//                     Zipf 1.2 hot set of its own (half).
//   drift             Zipf 1.0 whose hot set drifts: at every iteration each of the 2k hottest
//                     popularity positions swaps with a uniformly drawn one with probability 1/4.
//   layer-correlated  every layer mixes one Zipf 1.0 order shared by all layers (3/4) with a Zipf
//                     1.0 order of its own (1/4): the same experts run hot across layers.
//
// Every invocation is drawn with the sampling rule from its own stream (seed, layer, iteration,
// P), so any invocation can be asked for alone, from any thread.
#include "synthetic_families.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common.h"
#include "iser/error.h"
#include "sampler.h"
#include "sources.h"
#include "synthetic.h"

namespace iser::trace {
namespace {

constexpr uint64_t kOrderTag = 0x6f726472;   // "ordr": a layer's popularity order
constexpr uint64_t kSharedTag = 0x73686172;  // "shar": the order shared by all layers
constexpr uint64_t kPlaceTag = 0x706c6163;   // "plac": hot experts' home ranks
constexpr uint64_t kDriftTag = 0x64726966;   // "drif": one iteration's drift
constexpr uint64_t kRankTag = 0x72616e6b;    // "rank": a source rank's own hot set
constexpr double kScale = 1 << 29;

constexpr std::string_view kFixedFamilies[] = {"hot-ranks", "hot-spread", "rank-skew", "drift",
                                               "layer-correlated"};

// Weights (j + 1)^-alpha for popularity position j, added at expert order[j] (floor 1).
void add_zipf(std::vector<int64_t>& w, const std::vector<int32_t>& order, double alpha,
              double scale) {
  for (size_t j = 0; j < order.size(); ++j) {
    w[order[j]] += std::max<int64_t>(1, std::llround(scale * std::pow(double(j + 1), -alpha)));
  }
}

std::vector<int32_t> layer_order(uint64_t seed, uint64_t tag, int layer_idx, int E) {
  Xoshiro256 rng(mix_seed(seed, tag, static_cast<uint64_t>(layer_idx)));
  return shuffled_order(E, rng);
}

// Popularity order whose first positions are the given experts, the rest in a seeded order.
std::vector<int32_t> order_with_head(const std::vector<int32_t>& head, int E, Xoshiro256& rng) {
  std::vector<char> taken(static_cast<size_t>(E), 0);
  for (const int32_t e : head) taken[e] = 1;
  std::vector<int32_t> order = head;
  for (const int32_t e : shuffled_order(E, rng)) {
    if (!taken[e]) order.push_back(e);
  }
  return order;
}

// hot-ranks / hot-spread: `per_rank` hot experts on each of `num_hot_ranks` seeded ranks, at
// seeded home positions; P must divide E (the EP layout).
std::vector<int32_t> placed_order(uint64_t seed, int layer_idx, int E, int P, int num_hot_ranks,
                                  int per_rank) {
  ISER_CHECK(E % P == 0, "synthetic: hot-ranks / hot-spread need P = {} dividing E = {}", P, E);
  const int H = E / P;
  per_rank = std::min(per_rank, H);
  Xoshiro256 rng(
      mix_seed(seed, kPlaceTag, static_cast<uint64_t>(layer_idx), static_cast<uint64_t>(P)));
  const auto ranks = shuffled_order(P, rng);
  std::vector<int32_t> head;
  for (int t = 0; t < num_hot_ranks; ++t) {
    const auto offsets = shuffled_order(H, rng);
    for (int j = 0; j < per_rank; ++j) head.push_back(ranks[t] * H + offsets[j]);
  }
  // Hottest first, so rank ranks[0] holds positions 0 and num_hot_ranks (two per rank: the
  // hottest ranks alternate rather than one rank taking the top two).
  std::vector<int32_t> interleaved;
  for (int j = 0; j < per_rank; ++j) {
    for (int t = 0; t < num_hot_ranks; ++t) interleaved.push_back(head[t * per_rank + j]);
  }
  return order_with_head(interleaved, E, rng);
}

// drift: iteration i's order is iteration i-1's with each of the `hot` first positions swapped,
// with probability 1/4, with a uniformly drawn position.
std::vector<int32_t> drifted_order(uint64_t seed, int layer_idx, int64_t iteration_idx, int E,
                                   int hot) {
  auto order = layer_order(seed, kOrderTag, layer_idx, E);
  for (int64_t i = 1; i <= iteration_idx; ++i) {
    Xoshiro256 rng(
        mix_seed(seed, kDriftTag, static_cast<uint64_t>(layer_idx), static_cast<uint64_t>(i)));
    for (int j = 0; j < std::min(hot, E); ++j) {
      if (rng.below(4) == 0) std::swap(order[j], order[rng.below(static_cast<uint64_t>(E))]);
    }
  }
  return order;
}

class FamilySource final : public RoutingSource {
 public:
  FamilySource(SyntheticOptions options, double alpha)
      : options_(std::move(options)), alpha_(alpha) {
    meta_.model = "synthetic";
    meta_.dataset = options_.kind;
    meta_.source =
        fmt::format("synthetic:{} (E = {}, k = {}, L = {}, seed = {})", options_.kind,
                    options_.num_experts, options_.top_k, options_.num_layers, options_.seed);
    meta_.num_experts = options_.num_experts;
    meta_.top_k = options_.top_k;
    meta_.num_layers = options_.num_layers;
  }
  const TraceMetadata& metadata() const override { return meta_; }
  std::optional<int64_t> num_iterations(int, int) const override { return std::nullopt; }

  std::vector<int32_t> tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                              int tokens_per_rank) const override {
    check_invocation(meta_, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    const int k = options_.top_k;
    std::vector<int32_t> ids(static_cast<size_t>(num_ranks) * tokens_per_rank * k, -1);
    auto rng = invocation_stream(options_.seed, layer_idx, iteration_idx, num_ranks);
    const auto samplers = make_samplers(layer_idx, iteration_idx, num_ranks);
    for (int r = 0; r < num_ranks; ++r) {
      const ExpertSampler& s = samplers[samplers.size() == 1 ? 0 : r];
      s.sample_tokens(rng, routed_tokens(r, num_ranks, tokens_per_rank),
                      ids.data() + static_cast<size_t>(r) * tokens_per_rank * k);
    }
    return ids;
  }
  CountMatrix counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                     int tokens_per_rank) const override {
    check_invocation(meta_, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    CountMatrix counts(num_ranks, options_.num_experts);
    auto rng = invocation_stream(options_.seed, layer_idx, iteration_idx, num_ranks);
    const auto samplers = make_samplers(layer_idx, iteration_idx, num_ranks);
    for (int r = 0; r < num_ranks; ++r) {
      const ExpertSampler& s = samplers[samplers.size() == 1 ? 0 : r];
      s.sample_counts(rng, routed_tokens(r, num_ranks, tokens_per_rank), counts.row(r).data());
    }
    return counts;
  }

 private:
  bool rank_skew() const { return options_.kind == "rank-skew"; }

  // rank-skew: a seeded quarter of the ranks (at least one) route tau tokens, the rest tau/2.
  int64_t routed_tokens(int rank, int num_ranks, int tokens_per_rank) const {
    if (!rank_skew()) return tokens_per_rank;
    Xoshiro256 rng(mix_seed(options_.seed, kRankTag, static_cast<uint64_t>(num_ranks)));
    const auto order = shuffled_order(num_ranks, rng);
    const int busy = std::max(1, num_ranks / 4);
    const bool is_busy =
        std::find(order.begin(), order.begin() + busy, rank) != order.begin() + busy;
    return is_busy ? tokens_per_rank : tokens_per_rank / 2;
  }

  // One sampler for every rank, or one per source rank (rank-skew).
  std::vector<ExpertSampler> make_samplers(int layer_idx, int64_t iteration_idx, int P) const {
    const int E = options_.num_experts;
    const std::string& kind = options_.kind;
    std::vector<int64_t> w(static_cast<size_t>(E), 0);
    if (kind == "hot-ranks") {
      add_zipf(w, placed_order(options_.seed, layer_idx, E, P, std::max(1, P / 16), 2), 1.0,
               kScale);
    } else if (kind == "hot-spread") {
      add_zipf(w, placed_order(options_.seed, layer_idx, E, P, std::min(P, E), 1), 1.0, kScale);
    } else if (kind == "drift") {
      add_zipf(w, drifted_order(options_.seed, layer_idx, iteration_idx, E, 2 * options_.top_k),
               1.0, kScale);
    } else if (kind == "layer-correlated") {
      add_zipf(w, layer_order(options_.seed, kSharedTag, 0, E), 1.0, 3 * kScale / 4);
      add_zipf(w, layer_order(options_.seed, kOrderTag, layer_idx, E), 1.0, kScale / 4);
    } else {
      add_zipf(w, layer_order(options_.seed, kOrderTag, layer_idx, E), alpha_,
               rank_skew() ? kScale / 2 : kScale);
    }
    std::vector<ExpertSampler> samplers;
    if (!rank_skew()) {
      samplers.emplace_back(w, options_.top_k);
      return samplers;
    }
    for (int r = 0; r < P; ++r) {
      std::vector<int64_t> own = w;
      Xoshiro256 rng(mix_seed(options_.seed, kRankTag, static_cast<uint64_t>(layer_idx),
                              static_cast<uint64_t>(r), static_cast<uint64_t>(P)));
      add_zipf(own, shuffled_order(E, rng), 1.2, kScale / 2);
      samplers.emplace_back(own, options_.top_k);
    }
    return samplers;
  }

  SyntheticOptions options_;
  double alpha_;
  TraceMetadata meta_;
};

// The exponent of a "zipf-A" name, nullopt for other names; a malformed A throws.
std::optional<double> zipf_exponent(std::string_view kind) {
  constexpr std::string_view kPrefix = "zipf-";
  if (!kind.starts_with(kPrefix)) return std::nullopt;
  const std::string_view text = kind.substr(kPrefix.size());
  double alpha = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), alpha);
  ISER_CHECK(ec == std::errc{} && end == text.data() + text.size() && alpha > 0 && alpha <= 4,
             "synthetic: '{}': the Zipf exponent must be a number in (0, 4]", kind);
  return alpha;
}

}  // namespace

bool is_skew_family(std::string_view kind) {
  return kind.starts_with("zipf-") ||
         std::find(std::begin(kFixedFamilies), std::end(kFixedFamilies), kind) !=
             std::end(kFixedFamilies);
}

std::vector<std::string> skew_family_names() {
  std::vector<std::string> names{"zipf-0.6", "zipf-0.8", "zipf-1.0", "zipf-1.2", "zipf-1.5"};
  names.insert(names.end(), std::begin(kFixedFamilies), std::end(kFixedFamilies));
  return names;
}

std::unique_ptr<RoutingSource> make_skew_family(const SyntheticOptions& options) {
  ISER_CHECK(is_skew_family(options.kind), "synthetic: '{}' is not a skew family", options.kind);
  ISER_CHECK(!options.rank_imbalance, "synthetic: rank_imbalance tunes power-law, not '{}'",
             options.kind);
  const double alpha = zipf_exponent(options.kind).value_or(1.0);
  return std::make_unique<FamilySource>(options, alpha);
}

}  // namespace iser::trace
