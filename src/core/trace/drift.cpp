// The `drift` source: real topic histograms mixed per request, with a mixture that moves over
// iterations (definition in include/iser/trace.h, DriftOptions; statistics in docs/data.md).
//
// Streams: the anchors' topics come from (seed, anchor); an iteration's runs from (seed,
// iteration, P, tau), shared by every layer (a request is one topic in all layers); the expert
// draws from (seed, layer, iteration, P). Any invocation is produced without the others.
#include "drift.h"

#include <algorithm>
#include <cmath>

#include "iser/error.h"
#include "rng.h"
#include "sources.h"

namespace iser::trace {
namespace {

constexpr uint64_t kAnchorTag = 0x616e6368;  // "anch"
constexpr uint64_t kRunTag = 0x72756e73;     // "runs"
constexpr uint64_t kDrawTag = 0x64726177;    // "draw"

std::string topic_name(const TraceData& data, size_t index) {
  if (!data.metadata.dataset.empty()) return data.metadata.dataset;
  if (!data.categories.empty() && !data.categories.front().empty()) return data.categories.front();
  return fmt::format("topic{}", index);
}

// Geometric run length on {1, 2, ...} with the given mean (>= 1), by inversion.
int64_t run_length(Xoshiro256& rng, double mean) {
  if (mean <= 1.0) return 1;
  const double u = 1.0 - rng.uniform();  // (0, 1]
  const double length = 1.0 + std::floor(std::log(u) / std::log1p(-1.0 / mean));
  return static_cast<int64_t>(std::min(length, 1e15));
}

int draw_topic(Xoshiro256& rng, const std::vector<double>& mixture) {
  double u = rng.uniform();
  for (size_t t = 0; t + 1 < mixture.size(); ++t) {
    if (u < mixture[t]) return static_cast<int>(t);
    u -= mixture[t];
  }
  return static_cast<int>(mixture.size()) - 1;
}

}  // namespace

DriftSource::DriftSource(std::vector<TraceData> topics, const DriftOptions& options)
    : options_(options) {
  ISER_CHECK(!topics.empty(), "drift: no topic histograms given");
  ISER_CHECK(topics.size() <= 64, "drift: {} topics, at most 64", topics.size());
  ISER_CHECK(options.period >= 1, "drift: invalid period {} (need >= 1 iteration)", options.period);
  ISER_CHECK(std::isfinite(options.focus) && options.focus >= 0 && options.focus <= 1,
             "drift: invalid focus {} (need a share in [0, 1])", options.focus);
  ISER_CHECK(std::isfinite(options.request_tokens) && options.request_tokens >= 1,
             "drift: invalid request length {} (need a mean >= 1 token)", options.request_tokens);
  const TraceMetadata& first = topics.front().metadata;
  // Served layers: the layer ids every topic holds, ascending.
  std::vector<int> common;
  for (int l = 0; l < first.num_layers; ++l) common.push_back(first.layer_id(l));
  std::vector<std::string> sources;
  for (size_t t = 0; t < topics.size(); ++t) {
    const TraceData& data = topics[t];
    const TraceMetadata& m = data.metadata;
    data.validate(m.source);
    ISER_CHECK(data.kind == TraceKind::kHistograms,
               "drift: topic '{}' is not a histogram file (expert_counts [L, E])", m.source);
    ISER_CHECK(data.categories.size() == 1,
               "drift: topic '{}' holds {} histogram categories ({}); a topic file holds one",
               m.source, data.categories.size(), fmt::join(data.categories, ", "));
    ISER_CHECK(m.num_experts == first.num_experts && m.top_k == first.top_k,
               "drift: topic '{}' has E = {}, k = {} but '{}' has E = {}, k = {}", m.source,
               m.num_experts, m.top_k, first.source, first.num_experts, first.top_k);
    ISER_CHECK(m.model.empty() || first.model.empty() || m.model == first.model,
               "drift: topic '{}' records model '{}' but '{}' records '{}'", m.source, m.model,
               first.source, first.model);
    std::vector<int> ids;
    for (int l = 0; l < m.num_layers; ++l) ids.push_back(m.layer_id(l));
    std::vector<int> kept;
    std::set_intersection(common.begin(), common.end(), ids.begin(), ids.end(),
                          std::back_inserter(kept));
    common = std::move(kept);
    topic_names_.push_back(topic_name(data, t));
    sources.push_back(m.source);
  }
  ISER_CHECK(!common.empty(), "drift: the topics share no layer id ({})", fmt::join(sources, ", "));
  meta_.model = first.model;
  meta_.num_experts = first.num_experts;
  meta_.top_k = first.top_k;
  meta_.num_layers = static_cast<int>(common.size());
  meta_.layer_ids = common;
  meta_.dataset = fmt::format("drift({})", fmt::join(topic_names_, ","));
  meta_.source = fmt::format(
      "drift: {} ({}; period {} iterations, focus {}, seed {})", fmt::join(topic_names_, " + "),
      options.iid ? "i.i.d. tokens"
                  : fmt::format("requests of {} tokens on average", options.request_tokens),
      options.period, options.focus, options.seed);
  meta_.notes = fmt::format("topic files: {}", fmt::join(sources, ", "));
  const auto E = static_cast<size_t>(meta_.num_experts);
  for (const TraceData& data : topics) {
    const TraceMetadata& m = data.metadata;
    for (const int id : common) {
      int l = 0;
      while (m.layer_id(l) != id) ++l;
      samplers_.emplace_back(std::span(data.histograms.front()).subspan(l * E, E), m.top_k);
    }
  }
}

int DriftSource::anchor_topic(int64_t anchor_idx) const {
  Xoshiro256 rng(mix_seed(options_.seed, kAnchorTag, static_cast<uint64_t>(anchor_idx)));
  return static_cast<int>(rng.below(static_cast<uint64_t>(num_topics())));
}

std::vector<double> DriftSource::mixture(int64_t iteration_idx) const {
  const int T = num_topics();
  const int64_t anchor = iteration_idx / options_.period;
  const double f =
      static_cast<double>(iteration_idx % options_.period) / static_cast<double>(options_.period);
  const double rest = T > 1 ? (1.0 - options_.focus) / (T - 1) : 0.0;
  std::vector<double> mix(static_cast<size_t>(T), 0.0);
  for (const auto& [a, weight] : {std::pair{anchor, 1.0 - f}, std::pair{anchor + 1, f}}) {
    const int focus_topic = anchor_topic(a);
    for (int t = 0; t < T; ++t) {
      mix[t] += weight * (T == 1 ? 1.0 : t == focus_topic ? options_.focus : rest);
    }
  }
  return mix;
}

std::vector<TopicRun> DriftSource::runs(int64_t iteration_idx, int num_ranks,
                                        int tokens_per_rank) const {
  const int64_t batch = static_cast<int64_t>(num_ranks) * tokens_per_rank;
  const auto mix = mixture(iteration_idx);
  Xoshiro256 rng(mix_seed(options_.seed, kRunTag, static_cast<uint64_t>(iteration_idx),
                          static_cast<uint64_t>(num_ranks),
                          static_cast<uint64_t>(tokens_per_rank)));
  std::vector<TopicRun> out;
  for (int64_t t = 0; t < batch;) {
    const int topic = draw_topic(rng, mix);
    const int64_t length =
        options_.iid ? 1 : std::min(run_length(rng, options_.request_tokens), batch - t);
    if (!out.empty() && out.back().topic == topic && options_.iid) {
      out.back().length += length;  // i.i.d. tokens: merge equal neighbours to keep runs short
    } else {
      out.push_back({topic, t, length});
    }
    t += length;
  }
  return out;
}

void DriftSource::check(int layer_idx, int64_t iteration_idx, int num_ranks,
                        int tokens_per_rank) const {
  check_invocation(meta_, layer_idx, iteration_idx, num_ranks, tokens_per_rank);
  ISER_CHECK(iteration_idx < (int64_t{1} << 40), "drift: iteration {} beyond 2^40", iteration_idx);
}

template <typename Emit>
void DriftSource::for_each_piece(int64_t iteration_idx, int num_ranks, int tokens_per_rank,
                                 Emit&& emit) const {
  for (const TopicRun& run : runs(iteration_idx, num_ranks, tokens_per_rank)) {
    for (int64_t t = run.begin; t < run.begin + run.length;) {
      const auto rank = static_cast<int>(t / tokens_per_rank);
      const int64_t end =
          std::min(run.begin + run.length, static_cast<int64_t>(rank + 1) * tokens_per_rank);
      emit(rank, run.topic, t, end - t);
      t = end;
    }
  }
}

std::vector<int32_t> DriftSource::tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                                         int tokens_per_rank) const {
  check(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
  const int k = meta_.top_k;
  const auto L = static_cast<size_t>(meta_.num_layers);
  std::vector<int32_t> ids(static_cast<size_t>(num_ranks) * tokens_per_rank * k);
  Xoshiro256 rng(mix_seed(options_.seed, kDrawTag, static_cast<uint64_t>(layer_idx),
                          static_cast<uint64_t>(iteration_idx), static_cast<uint64_t>(num_ranks)));
  for_each_piece(
      iteration_idx, num_ranks, tokens_per_rank, [&](int, int topic, int64_t first, int64_t count) {
        samplers_[topic * L + layer_idx].sample_tokens(rng, count, ids.data() + first * k);
      });
  return ids;
}

// The same draws as tokens() (same stream, same order), accumulated into counts.
CountMatrix DriftSource::counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                                int tokens_per_rank) const {
  check(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
  const auto L = static_cast<size_t>(meta_.num_layers);
  CountMatrix counts(num_ranks, meta_.num_experts);
  Xoshiro256 rng(mix_seed(options_.seed, kDrawTag, static_cast<uint64_t>(layer_idx),
                          static_cast<uint64_t>(iteration_idx), static_cast<uint64_t>(num_ranks)));
  for_each_piece(
      iteration_idx, num_ranks, tokens_per_rank, [&](int rank, int topic, int64_t, int64_t count) {
        samplers_[topic * L + layer_idx].sample_counts(rng, count, counts.row(rank).data());
      });
  return counts;
}

std::unique_ptr<RoutingSource> make_drift_source(std::vector<TraceData> topics,
                                                 const DriftOptions& options) {
  return std::make_unique<DriftSource>(std::move(topics), options);
}

}  // namespace iser::trace

namespace iser {

std::unique_ptr<RoutingSource> make_drift(const DriftOptions& options) {
  const auto paths = options.topics.empty() ? bundled_drift_topics() : options.topics;
  std::vector<TraceData> topics;
  for (const auto& path : paths) topics.push_back(read_trace_data(path));
  return trace::make_drift_source(std::move(topics), options);
}

}  // namespace iser
