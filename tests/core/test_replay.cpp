#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "iser/error.h"
#include "iser/metrics.h"
#include "iser/replay.h"

namespace iser {
namespace {

// A token source whose every token of layer l picks experts in a fixed skewed pattern: rank r's
// token t of iteration i chooses expert (t * 7 + l) % hot for the first choice (hot experts all
// on rank 0) and a uniform expert for the others. Deterministic and thread-safe.
class FixedSource final : public RoutingSource {
 public:
  FixedSource(int num_experts, int top_k, int num_layers, std::optional<int64_t> tokens)
      : total_tokens_(tokens) {
    meta_.model = "fixed";
    meta_.dataset = "test";
    meta_.source = "fixed-source";
    meta_.num_experts = num_experts;
    meta_.top_k = top_k;
    meta_.num_layers = num_layers;
  }
  const TraceMetadata& metadata() const override { return meta_; }
  std::optional<int64_t> num_iterations(int p, int tau) const override {
    if (!total_tokens_) return std::nullopt;
    return *total_tokens_ / (static_cast<int64_t>(p) * tau);
  }
  int64_t dropped_tokens(int p, int tau) const override {
    return total_tokens_ ? *total_tokens_ % (static_cast<int64_t>(p) * tau) : 0;
  }
  std::vector<int32_t> tokens(int layer, int64_t iteration, int p, int tau) const override {
    const int k = meta_.top_k;
    const int e = meta_.num_experts;
    std::vector<int32_t> ids(static_cast<size_t>(p) * tau * k);
    for (int64_t t = 0; t < static_cast<int64_t>(p) * tau; ++t) {
      const int64_t global = iteration * p * tau + t;
      ids[t * k] = static_cast<int32_t>((global * 7 + layer) % 4);  // hot: experts 0..3
      for (int c = 1; c < k; ++c) {
        ids[t * k + c] = static_cast<int32_t>(4 + (global * 13 + int64_t{c} * 5) % (e - 4));
      }
    }
    return ids;
  }

 private:
  TraceMetadata meta_;
  std::optional<int64_t> total_tokens_;
};

TEST(ImbalanceRatio, HandComputed) {
  const std::vector<int64_t> loads{10, 20, 30, 40};  // mean 25
  EXPECT_DOUBLE_EQ(imbalance_ratio(loads), 40.0 / 25.0);
  const std::vector<int64_t> zeros{0, 0};
  EXPECT_DOUBLE_EQ(imbalance_ratio(zeros), 1.0);
}

TEST(Metrics, SendOutAndReceiveInOfHomeRouting) {
  // P = 2, E = 4 (H = 2). Rank 0 sends 3 routes to expert 2 (rank 1); rank 1 sends 5 to expert 0
  // and 1 to expert 1 (rank 0).
  const auto topo = Topology::make(2, 4, 1);
  CountMatrix c(2, 4);
  c.at(0, 0) = 4;
  c.at(0, 2) = 3;
  c.at(1, 0) = 5;
  c.at(1, 1) = 1;
  c.at(1, 3) = 2;
  auto none = make_policy("none", topo);
  const auto m = measure_invocation(topo, c, none->plan(c));
  // Loads: rank 0 = 4 + 5 + 1 = 10, rank 1 = 3 + 2 = 5: R = 10 / 7.5.
  EXPECT_DOUBLE_EQ(m.r_before, 10.0 / 7.5);
  EXPECT_DOUBLE_EQ(m.r_after, m.r_before);
  EXPECT_EQ(m.max_send_out, 6);    // rank 1 sends 5 + 1
  EXPECT_EQ(m.max_receive_in, 6);  // rank 0 receives 6
  EXPECT_EQ(m.remote_copies, 0);
  auto oracle = make_policy("oracle", topo);
  const auto mo = measure_invocation(topo, c, oracle->plan(c));
  EXPECT_DOUBLE_EQ(mo.r_after, 8.0 / 7.5);  // 15 routes: 8 + 7
  EXPECT_EQ(mo.max_send_out, -1);
}

TEST(Replay, AggregatesNoneAndOracle) {
  const FixedSource source(16, 2, 3, std::nullopt);
  ReplayConfig config;
  config.ep_degrees = {2, 4};
  config.tokens_per_rank = 64;
  config.num_slots = 2;
  config.policies = {"none", "oracle"};
  config.validate = true;
  config.num_threads = 2;
  const auto result = run_replay(source, config);
  ASSERT_EQ(result.results.size(), 4u);
  EXPECT_EQ(result.iterations_per_ep, (std::vector<int64_t>{2, 2}));
  for (const auto& s : result.results) {
    EXPECT_EQ(s.invocations, 3 * 2);
    EXPECT_EQ(s.per_layer_mean_r.size(), 3u);
    if (s.policy == "none") {
      EXPECT_DOUBLE_EQ(s.mean_r, s.mean_r_before);
      EXPECT_DOUBLE_EQ(s.excess_removed, 0.0);
    } else {
      EXPECT_LT(s.mean_r, s.mean_r_before);
      EXPECT_GT(s.excess_removed, 0.9);
      EXPECT_FALSE(s.has_flows);
    }
  }
  // Same inputs, one thread: identical numbers.
  config.num_threads = 1;
  const auto again = run_replay(source, config);
  EXPECT_EQ(replay_to_json(again), replay_to_json(result));
  const auto json = nlohmann::json::parse(replay_to_json(result));
  EXPECT_EQ(json["results"][0]["policy"], "none");
  EXPECT_TRUE(json["results"][1]["max_send_out"].is_null());
}

TEST(Replay, RejectsBadConfigurations) {
  const FixedSource source(16, 2, 3, int64_t{100});
  ReplayConfig config;
  config.ep_degrees = {4};
  config.tokens_per_rank = 64;  // 256 tokens needed, 100 available
  EXPECT_THROW(run_replay(source, config), Error);
  config.tokens_per_rank = 8;
  config.ep_degrees = {3};  // 3 does not divide 16
  EXPECT_THROW(run_replay(source, config), Error);
  config.ep_degrees = {4};
  config.policies = {"no-such-policy"};
  EXPECT_THROW(run_replay(source, config), Error);
  config.policies = {"none"};
  config.layers = {5};
  EXPECT_THROW(run_replay(source, config), Error);
  config.layers = {};
  const auto ok = run_replay(source, config);
  EXPECT_EQ(ok.iterations_per_ep[0], 3);      // 100 / 32
  EXPECT_EQ(ok.dropped_tokens_per_ep[0], 4);  // 100 - 96
}

}  // namespace
}  // namespace iser
