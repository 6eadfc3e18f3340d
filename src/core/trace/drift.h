// The `drift` source (docs/data.md): batches that mix requests from several real topic
// histograms with a mixture that changes over iterations. Internal interface for the tests.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "iser/trace.h"
#include "sampler.h"

namespace iser::trace {

// A run of consecutive tokens of one iteration's batch (rank-major order) from one topic.
struct TopicRun {
  int topic = 0;
  int64_t begin = 0;
  int64_t length = 0;
};

class DriftSource final : public RoutingSource {
 public:
  // topics: histogram data of one model (same E and k); the served layers are the layer ids
  // every topic holds.
  DriftSource(std::vector<TraceData> topics, const DriftOptions& options);

  const TraceMetadata& metadata() const override { return meta_; }
  std::optional<int64_t> num_iterations(int, int) const override { return std::nullopt; }
  std::vector<int32_t> tokens(int layer_idx, int64_t iteration_idx, int num_ranks,
                              int tokens_per_rank) const override;
  CountMatrix counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                     int tokens_per_rank) const override;

  int num_topics() const { return static_cast<int>(topic_names_.size()); }
  const std::vector<std::string>& topic_names() const { return topic_names_; }
  // The topic with the focus share at anchor a (iterations a * period).
  int anchor_topic(int64_t anchor_idx) const;
  // Topic probabilities of iteration i's requests (sums to 1).
  std::vector<double> mixture(int64_t iteration_idx) const;
  // The batch of iteration i cut into runs, in token order, covering [0, P * tau).
  std::vector<TopicRun> runs(int64_t iteration_idx, int num_ranks, int tokens_per_rank) const;

 private:
  void check(int layer_idx, int64_t iteration_idx, int num_ranks, int tokens_per_rank) const;
  // Calls emit(rank, topic, tokens) for each piece of a run that falls on one rank.
  template <typename Emit>
  void for_each_piece(int64_t iteration_idx, int num_ranks, int tokens_per_rank, Emit&& emit) const;

  DriftOptions options_;
  TraceMetadata meta_;
  std::vector<std::string> topic_names_;
  std::vector<ExpertSampler> samplers_;  // [topic * L + layer]
};

std::unique_ptr<RoutingSource> make_drift_source(std::vector<TraceData> topics,
                                                 const DriftOptions& options);

}  // namespace iser::trace
