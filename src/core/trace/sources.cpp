// RoutingSource implementations over in-memory data: the batching rule for token traces, the
// sampling rule for histograms, recorded per-iteration counts.
#include <algorithm>

#include "iser/error.h"
#include "iser/trace.h"
#include "sampler.h"
#include "sources.h"

namespace iser {

CountMatrix RoutingSource::counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                                  int tokens_per_rank) const {
  const auto ids = tokens(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
  return CountMatrix::from_topk(ids, num_ranks, tokens_per_rank, metadata().top_k,
                                metadata().num_experts);
}

double histogram_rank_imbalance(std::span<const int64_t> histogram, int num_ranks) {
  const auto num_experts = static_cast<int64_t>(histogram.size());
  ISER_CHECK(num_ranks >= 1 && num_experts % num_ranks == 0,
             "rank imbalance needs P dividing E (P = {}, E = {})", num_ranks, num_experts);
  const int64_t per_rank = num_experts / num_ranks;
  int64_t total = 0;
  int64_t max_load = 0;
  for (int r = 0; r < num_ranks; ++r) {
    int64_t load = 0;
    for (int64_t e = r * per_rank; e < (r + 1) * per_rank; ++e) load += histogram[e];
    total += load;
    max_load = std::max(max_load, load);
  }
  return total == 0 ? 1.0 : static_cast<double>(max_load) * num_ranks / static_cast<double>(total);
}

namespace trace {

void check_invocation(const TraceMetadata& meta, int layer_idx, int64_t iteration_idx,
                      int num_ranks, int tokens_per_rank) {
  ISER_CHECK(layer_idx >= 0 && layer_idx < meta.num_layers, "{}: layer {} out of range [0, {})",
             meta.source, layer_idx, meta.num_layers);
  ISER_CHECK(iteration_idx >= 0, "{}: iteration {} is negative", meta.source, iteration_idx);
  ISER_CHECK(num_ranks >= 1 && num_ranks <= kMaxRanks, "{}: P = {} out of range [1, {}]",
             meta.source, num_ranks, kMaxRanks);
  ISER_CHECK(tokens_per_rank >= 0 && tokens_per_rank <= kMaxTokensPerRank,
             "{}: tokens per rank {} out of range [0, {}]", meta.source, tokens_per_rank,
             kMaxTokensPerRank);
}

namespace {

class TokenSource final : public RoutingSource {
 public:
  explicit TokenSource(TraceData data) : data_(std::move(data)) {}
  const TraceMetadata& metadata() const override { return data_.metadata; }

  std::optional<int64_t> num_iterations(int num_ranks, int tokens_per_rank) const override {
    const int64_t batch = static_cast<int64_t>(num_ranks) * tokens_per_rank;
    ISER_CHECK(batch > 0, "{}: P * tau = {} * {} must be positive", data_.metadata.source,
               num_ranks, tokens_per_rank);
    return data_.metadata.num_tokens / batch;
  }
  int64_t dropped_tokens(int num_ranks, int tokens_per_rank) const override {
    const int64_t batch = static_cast<int64_t>(num_ranks) * tokens_per_rank;
    return batch > 0 ? data_.metadata.num_tokens % batch : data_.metadata.num_tokens;
  }

  std::vector<int32_t> tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                              int tokens_per_rank) const override {
    const auto ids = slice(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    return {ids.begin(), ids.end()};
  }
  CountMatrix counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                     int tokens_per_rank) const override {
    return CountMatrix::from_topk(slice(layer_idx, iteration_idx, num_ranks, tokens_per_rank),
                                  num_ranks, tokens_per_rank, data_.metadata.top_k,
                                  data_.metadata.num_experts);
  }

 private:
  // Batching rule: iteration i is tokens [i*P*tau, (i+1)*P*tau) of the layer, rank-major.
  std::span<const int32_t> slice(int layer_idx, int64_t iteration_idx, int num_ranks,
                                 int tokens_per_rank) const {
    const auto& m = data_.metadata;
    check_invocation(m, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    const int64_t available = *num_iterations(num_ranks, tokens_per_rank);
    ISER_CHECK(iteration_idx < available,
               "{}: iteration {} out of range: {} tokens give {} iterations of P * tau = {} * {}",
               m.source, iteration_idx, m.num_tokens, available, num_ranks, tokens_per_rank);
    const int64_t batch = static_cast<int64_t>(num_ranks) * tokens_per_rank;
    const int64_t first = (layer_idx * m.num_tokens + iteration_idx * batch) * m.top_k;
    return std::span<const int32_t>(data_.topk_ids)
        .subspan(static_cast<size_t>(first), static_cast<size_t>(batch * m.top_k));
  }

  TraceData data_;
};

class HistogramSource final : public RoutingSource {
 public:
  HistogramSource(TraceMetadata meta, std::span<const int64_t> histograms, uint64_t seed)
      : meta_(std::move(meta)), seed_(seed) {
    const auto E = static_cast<size_t>(meta_.num_experts);
    for (int l = 0; l < meta_.num_layers; ++l) {
      samplers_.emplace_back(histograms.subspan(l * E, E), meta_.top_k);
    }
  }
  const TraceMetadata& metadata() const override { return meta_; }
  std::optional<int64_t> num_iterations(int, int) const override { return std::nullopt; }

  std::vector<int32_t> tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                              int tokens_per_rank) const override {
    check_invocation(meta_, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    return sample_invocation_tokens(samplers_[layer_idx], seed_, layer_idx, iteration_idx,
                                    num_ranks, tokens_per_rank);
  }
  CountMatrix counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                     int tokens_per_rank) const override {
    check_invocation(meta_, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    return sample_invocation_counts(samplers_[layer_idx], seed_, layer_idx, iteration_idx,
                                    num_ranks, tokens_per_rank);
  }

 private:
  TraceMetadata meta_;
  uint64_t seed_;
  std::vector<ExpertSampler> samplers_;
};

class IterationCountsSource final : public RoutingSource {
 public:
  IterationCountsSource(TraceData data, uint64_t seed) : data_(std::move(data)), seed_(seed) {}
  const TraceMetadata& metadata() const override { return data_.metadata; }
  std::optional<int64_t> num_iterations(int, int) const override { return data_.num_iterations; }

  std::vector<int32_t> tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                              int tokens_per_rank) const override {
    check(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    if (exact(num_ranks)) {
      return tokens_from_counts(recorded(layer_idx, iteration_idx), tokens_per_rank,
                                data_.metadata.top_k, data_.metadata.source);
    }
    return sample_invocation_tokens(sampler(layer_idx, iteration_idx), seed_, layer_idx,
                                    iteration_idx, num_ranks, tokens_per_rank);
  }
  CountMatrix counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                     int tokens_per_rank) const override {
    check(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    if (exact(num_ranks)) return recorded(layer_idx, iteration_idx);
    return sample_invocation_counts(sampler(layer_idx, iteration_idx), seed_, layer_idx,
                                    iteration_idx, num_ranks, tokens_per_rank);
  }

 private:
  bool exact(int num_ranks) const { return data_.num_ranks == num_ranks; }
  void check(int layer_idx, int64_t iteration_idx, int num_ranks, int tokens_per_rank) const {
    check_invocation(data_.metadata, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
    ISER_CHECK(iteration_idx < data_.num_iterations, "{}: iteration {} out of range [0, {})",
               data_.metadata.source, iteration_idx, data_.num_iterations);
  }
  // [P, E] block of the recorded per-rank counts.
  CountMatrix recorded(int layer_idx, int64_t iteration_idx) const {
    const auto E = static_cast<size_t>(data_.metadata.num_experts);
    const auto P = static_cast<size_t>(data_.num_ranks);
    const size_t base = (static_cast<size_t>(iteration_idx) * data_.metadata.num_layers +
                         static_cast<size_t>(layer_idx)) *
                        P * E;
    CountMatrix m(data_.num_ranks, data_.metadata.num_experts);
    for (size_t i = 0; i < P * E; ++i) {
      const int64_t v = data_.iteration_counts[base + i];
      ISER_CHECK(v <= INT32_MAX, "{}: count {} exceeds int32", data_.metadata.source, v);
      m.data()[i] = static_cast<int32_t>(v);
    }
    return m;
  }
  // The iteration's histogram (summed over recorded ranks) for the sampling rule.
  ExpertSampler sampler(int layer_idx, int64_t iteration_idx) const {
    const auto E = static_cast<size_t>(data_.metadata.num_experts);
    const auto P = static_cast<size_t>(std::max(data_.num_ranks, 1));
    const size_t base = (static_cast<size_t>(iteration_idx) * data_.metadata.num_layers +
                         static_cast<size_t>(layer_idx)) *
                        P * E;
    std::vector<int64_t> hist(E, 0);
    for (size_t r = 0; r < P; ++r) {
      for (size_t e = 0; e < E; ++e) hist[e] += data_.iteration_counts[base + r * E + e];
    }
    return ExpertSampler(hist, data_.metadata.top_k);
  }

  TraceData data_;
  uint64_t seed_;
};

}  // namespace

std::vector<int32_t> sample_invocation_tokens(const ExpertSampler& sampler, uint64_t seed,
                                              int layer_idx, int64_t iteration_idx, int num_ranks,
                                              int tokens_per_rank) {
  auto rng = invocation_stream(seed, layer_idx, iteration_idx, num_ranks);
  const int64_t num_tokens = static_cast<int64_t>(num_ranks) * tokens_per_rank;
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens * sampler.top_k()));
  sampler.sample_tokens(rng, num_tokens, ids.data());
  return ids;
}

CountMatrix sample_invocation_counts(const ExpertSampler& sampler, uint64_t seed, int layer_idx,
                                     int64_t iteration_idx, int num_ranks, int tokens_per_rank) {
  auto rng = invocation_stream(seed, layer_idx, iteration_idx, num_ranks);
  CountMatrix counts(num_ranks, sampler.num_experts());
  for (int r = 0; r < num_ranks; ++r) {
    sampler.sample_counts(rng, tokens_per_rank, counts.row(r).data());
  }
  return counts;
}

// Rank r's routes laid out expert by expert, route q going to token q mod T_r, choice q div T_r:
// an expert's routes are consecutive, so they land on distinct tokens when its count <= T_r.
std::vector<int32_t> tokens_from_counts(const CountMatrix& counts, int tokens_per_rank, int top_k,
                                        std::string_view what) {
  const int P = counts.num_ranks();
  std::vector<int32_t> ids(static_cast<size_t>(P) * tokens_per_rank * top_k, -1);
  for (int r = 0; r < P; ++r) {
    const auto row = counts.row(r);
    int64_t routes = 0;
    int64_t max_count = 0;
    for (const int32_t c : row) {
      routes += c;
      max_count = std::max<int64_t>(max_count, c);
    }
    const int64_t T_r = std::max((routes + top_k - 1) / top_k, max_count);
    ISER_CHECK(T_r <= tokens_per_rank,
               "{}: rank {} recorded {} routes ({} tokens of top-{}), more than tau = {}", what, r,
               routes, T_r, top_k, tokens_per_rank);
    int32_t* rank_ids = ids.data() + static_cast<size_t>(r) * tokens_per_rank * top_k;
    int64_t q = 0;
    for (int e = 0; e < counts.num_experts(); ++e) {
      for (int32_t c = 0; c < row[e]; ++c, ++q) rank_ids[(q % T_r) * top_k + q / T_r] = e;
    }
  }
  return ids;
}

}  // namespace trace

std::vector<int> find_routeless_layers(const TraceData& data) {
  const auto L = static_cast<size_t>(data.metadata.num_layers);
  std::vector<bool> routed(L, false);
  switch (data.kind) {
    case TraceKind::kTokens: {
      const size_t per_layer = data.topk_ids.size() / std::max<size_t>(L, 1);
      for (size_t i = 0; i < data.topk_ids.size(); ++i) {
        if (data.topk_ids[i] >= 0) routed[i / per_layer] = true;
      }
      break;
    }
    case TraceKind::kHistograms:
    case TraceKind::kIterationCounts: {
      // Both are [..., L, (P,) E] blocks repeated: the layer is the block index modulo L.
      const size_t block = static_cast<size_t>(data.metadata.num_experts) *
                           static_cast<size_t>(std::max(data.num_ranks, 1));
      const auto scan = [&](const std::vector<int64_t>& counts, size_t block_size) {
        for (size_t i = 0; i < counts.size(); ++i) {
          if (counts[i] != 0) routed[(i / block_size) % L] = true;
        }
      };
      if (data.kind == TraceKind::kHistograms) {
        for (const auto& h : data.histograms)
          scan(h, static_cast<size_t>(data.metadata.num_experts));
      } else {
        scan(data.iteration_counts, block);
      }
      break;
    }
  }
  std::vector<int> out;
  for (size_t l = 0; l < L; ++l) {
    if (!routed[l]) out.push_back(static_cast<int>(l));
  }
  return out;
}

std::unique_ptr<RoutingSource> make_routing_source(TraceData data, const TraceOptions& options) {
  data.validate(data.metadata.source);
  data.metadata.routeless_layers = find_routeless_layers(data);
  switch (data.kind) {
    case TraceKind::kTokens:
      return std::make_unique<trace::TokenSource>(std::move(data));
    case TraceKind::kHistograms: {
      size_t c = 0;
      if (!options.category.empty()) {
        const auto it = std::find(data.categories.begin(), data.categories.end(), options.category);
        ISER_CHECK(it != data.categories.end(), "{}: no histogram category '{}' (have: {})",
                   data.metadata.source, options.category, fmt::join(data.categories, ", "));
        c = static_cast<size_t>(it - data.categories.begin());
      }
      TraceMetadata meta = data.metadata;
      if (!data.categories[c].empty()) {
        meta.dataset = meta.dataset.empty()
                           ? data.categories[c]
                           : fmt::format("{}/{}", meta.dataset, data.categories[c]);
      }
      return std::make_unique<trace::HistogramSource>(std::move(meta), data.histograms[c],
                                                      options.seed);
    }
    case TraceKind::kIterationCounts:
      return std::make_unique<trace::IterationCountsSource>(std::move(data), options.seed);
  }
  throw Error("internal error: unknown trace kind");
}

}  // namespace iser
