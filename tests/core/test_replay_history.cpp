// Static placements plan only from the past: warm-up iterations left out of every mean,
// --plan-trace histories matched by layer id, eplb-oracle in-sample, and the cost columns.
#include <gtest/gtest.h>

#include <cmath>

#include "iser/error.h"
#include "iser/metrics.h"
#include "iser/policy.h"
#include "iser/replay.h"
#include "trace_test_util.h"

namespace iser {
namespace {

// Per-invocation counts chosen by (layer, iteration): iteration i sends every route of layer l
// to expert (i + l) % E on every rank, plus one uniform route per expert (so R is finite and
// differs per iteration). Layer ids as given.
class ShiftingSource final : public RoutingSource {
 public:
  ShiftingSource(int num_experts, int num_layers, std::vector<int> layer_ids,
                 std::optional<int64_t> iterations = std::nullopt)
      : iterations_(iterations) {
    meta_.source = "shifting";
    meta_.model = "test-model";
    meta_.num_experts = num_experts;
    meta_.top_k = 1;
    meta_.num_layers = num_layers;
    meta_.layer_ids = std::move(layer_ids);
  }
  const TraceMetadata& metadata() const override { return meta_; }
  std::optional<int64_t> num_iterations(int, int) const override { return iterations_; }
  std::vector<int32_t> tokens(int, int64_t, int, int) const override { throw Error("counts only"); }
  CountMatrix counts(int layer, int64_t iteration, int p, int tau) const override {
    CountMatrix m(p, meta_.num_experts);
    const int hot = static_cast<int>((iteration * 3 + layer) % meta_.num_experts);
    for (int r = 0; r < p; ++r) {
      for (int e = 0; e < meta_.num_experts; ++e) m.row(r)[e] = 1;
      m.row(r)[hot] += tau - meta_.num_experts;
    }
    return m;
  }

 private:
  TraceMetadata meta_;
  std::optional<int64_t> iterations_;
};

double r_of(const CountMatrix& counts, int p) {
  const auto hist = counts.histogram();
  std::vector<int64_t> loads(static_cast<size_t>(p), 0);
  const int h = counts.num_experts() / p;
  for (int e = 0; e < counts.num_experts(); ++e) loads[e / h] += hist[e];
  return imbalance_ratio(loads);
}

ReplayConfig small_config() {
  ReplayConfig config;
  config.ep_degrees = {4};
  config.tokens_per_rank = 64;
  config.num_slots = 2;
  config.num_threads = 1;
  return config;
}

TEST(ReplayWarmup, LeftOutOfEveryMean) {
  const ShiftingSource source(16, 2, {});
  ReplayConfig config = small_config();
  config.policies = {"none"};
  config.warmup = 3;
  config.iterations = 4;
  const auto result = run_replay(source, config);
  EXPECT_EQ(result.warmup_iterations, 3);
  EXPECT_EQ(result.iterations_per_ep[0], 4);
  const PolicySummary& s = result.results[0];
  EXPECT_EQ(s.invocations, 2 * 4);
  ASSERT_EQ(s.per_iteration_mean_r_before.size(), 4u);
  double sum = 0;
  for (int64_t j = 0; j < 4; ++j) {
    double layer_mean = 0;
    for (int l = 0; l < 2; ++l) layer_mean += r_of(source.counts(l, 3 + j, 4, 64), 4) / 2;
    EXPECT_NEAR(s.per_iteration_mean_r_before[j], layer_mean, 1e-12) << j;
    sum += layer_mean;
  }
  EXPECT_NEAR(s.mean_r_before, sum / 4, 1e-12);
}

TEST(ReplayWarmup, DefaultsToTheWindowWhenAPolicyPlansFromTheServedPast) {
  const ShiftingSource source(16, 1, {});
  ReplayConfig config = small_config();
  config.iterations = 2;
  config.policies = {"none", "halo-q"};
  EXPECT_EQ(run_replay(source, config).warmup_iterations, 0);
  config.policies = {"none", "eplb-window"};
  config.policy_options.eplb_window = 5;
  EXPECT_EQ(run_replay(source, config).warmup_iterations, 5);
  config.policies = {"eplb"};
  config.warmup = 0;
  testing::expect_error([&] { run_replay(source, config); }, {"plans from the past", "--warmup"});
}

TEST(ReplayWarmup, TokenTracesMeasureWhatIsLeft) {
  const ShiftingSource source(16, 1, {}, int64_t{10});
  ReplayConfig config = small_config();
  config.policies = {"none"};
  config.warmup = 4;
  EXPECT_EQ(run_replay(source, config).iterations_per_ep[0], 6);
  config.warmup = 10;
  testing::expect_error([&] { run_replay(source, config); }, {"none left after 10 warm-up"});
}

TEST(ReplayWarmup, EplbPlansFromTheWarmupOnlyAndTheOracleFromWhatItServes) {
  const ShiftingSource source(16, 1, {});
  ReplayConfig config = small_config();
  config.policies = {"eplb", "eplb-oracle"};
  config.warmup = 2;
  config.iterations = 3;
  const auto result = run_replay(source, config);
  const Topology topo = Topology::make(4, 16, 2);
  std::vector<CountMatrix> all;
  for (int64_t i = 0; i < 5; ++i) all.push_back(source.counts(0, i, 4, 64));
  auto past = make_policy("eplb", topo);
  past->prepare(std::span(all).first(2));
  auto oracle = make_policy("eplb", topo);
  oracle->prepare(std::span(all).subspan(2));
  double past_r = 0, oracle_r = 0;
  for (int64_t i = 2; i < 5; ++i) {
    past_r += measure_invocation(topo, all[i], past->plan(all[i])).r_after / 3;
    oracle_r += measure_invocation(topo, all[i], oracle->plan(all[i])).r_after / 3;
  }
  EXPECT_NEAR(result.results[0].mean_r, past_r, 1e-12);
  EXPECT_NEAR(result.results[1].mean_r, oracle_r, 1e-12);
  // The hot expert moves every iteration: the past misses it, the oracle does not.
  EXPECT_GT(result.results[0].mean_r, result.results[1].mean_r);
}

PlanHistory history_with_ids(std::vector<int> ids, int num_experts, int hot) {
  PlanHistory h;
  h.metadata.source = "plan.safetensors";
  h.metadata.model = "test-model";
  h.metadata.num_experts = num_experts;
  h.metadata.num_layers = static_cast<int>(ids.size());
  h.metadata.layer_ids = std::move(ids);
  for (size_t l = 0; l < h.metadata.layer_ids.size(); ++l) {
    std::vector<int64_t> hist(static_cast<size_t>(num_experts), 10);
    hist[static_cast<size_t>(hot + static_cast<int>(l))] = 5000;
    h.histograms.push_back(hist);
  }
  return h;
}

TEST(ReplayPlanTrace, MatchesLayersById) {
  // Served layers 3 and 7; the plan file holds 1, 3, 5, 7 (different positions).
  const ShiftingSource source(16, 2, {3, 7});
  ReplayConfig config = small_config();
  config.policies = {"eplb"};
  config.iterations = 2;
  config.plan_history = history_with_ids({1, 3, 5, 7}, 16, 4);
  const auto result = run_replay(source, config);
  EXPECT_EQ(result.warmup_iterations, 0);  // a plan history needs no served past
  EXPECT_EQ(result.layer_ids, (std::vector<int>{3, 7}));
  // Served layer 3 (index 0) must be planned from plan row 1 (hot expert 5), layer 7 (index 1)
  // from row 3 (hot expert 7).
  const Topology topo = Topology::make(4, 16, 2);
  for (int l = 0; l < 2; ++l) {
    auto eplb = make_policy("eplb", topo);
    CountMatrix planned(4, 16);
    const auto& hist = config.plan_history->histograms[static_cast<size_t>(2 * l + 1)];
    for (int e = 0; e < 16; ++e) planned.row(0)[e] = static_cast<int32_t>(hist[e]);
    eplb->prepare(std::span(&planned, 1));
    double r = 0;
    for (int64_t i = 0; i < 2; ++i) {
      const auto counts = source.counts(l, i, 4, 64);
      r += measure_invocation(topo, counts, eplb->plan(counts)).r_after / 2;
    }
    EXPECT_NEAR(result.results[0].per_layer_mean_r[static_cast<size_t>(l)], r, 1e-12) << l;
  }
}

TEST(ReplayPlanTrace, ClearErrorsWhenLayersCannotBeMatched) {
  const ShiftingSource source(16, 3, {});  // layers 0, 1, 2 (no ids in the file)
  ReplayConfig config = small_config();
  config.policies = {"eplb"};
  config.iterations = 1;
  config.plan_history = history_with_ids({1, 2, 9}, 16, 0);
  testing::expect_error([&] { run_replay(source, config); },
                        {"plan.safetensors", "no layer 0", "1, 2, 9", "--layers"});
  config.layers = {1, 2};  // the common layers
  EXPECT_NO_THROW(run_replay(source, config));
  config.plan_history = history_with_ids({0, 1, 2}, 32, 0);
  testing::expect_error([&] { run_replay(source, config); }, {"E = 32", "shifting"});
  config.plan_history = history_with_ids({0, 1, 2}, 16, 0);
  config.plan_history->metadata.model = "other-model";
  testing::expect_error([&] { run_replay(source, config); }, {"other-model", "test-model"});
}

TEST(ReplayPlanTrace, HistoryFromAnyFormat) {
  TraceData tokens;
  tokens.kind = TraceKind::kTokens;
  tokens.metadata.source = "t";
  tokens.metadata.num_experts = 4;
  tokens.metadata.top_k = 2;
  tokens.metadata.num_layers = 2;
  tokens.metadata.num_tokens = 3;
  tokens.metadata.layer_ids = {5, 9};
  tokens.topk_ids = {0, 1, 0, 2, 3, -1,  // layer 5
                     1, 2, 3, 0, 3, 2};  // layer 9
  const PlanHistory h = plan_history_from(tokens);
  EXPECT_EQ(h.metadata.layer_ids, (std::vector<int>{5, 9}));
  EXPECT_EQ(h.histograms[0], (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_EQ(h.histograms[1], (std::vector<int64_t>{1, 1, 2, 2}));
}

TEST(ReplayCosts, StaticSlotsPerLayerAgainstSharedBanks) {
  const ShiftingSource source(16, 1, {});
  ReplayConfig config = small_config();
  config.policies = {"none", "eplb", "eplb-window", "eplb-equal-mem", "halo-q", "oracle"};
  config.iterations = 3;
  config.cost_model = ReplayCostModel{"m", 10, 1e6, 2, ""};
  config.num_slots = 2;
  const auto result = run_replay(source, config);
  EXPECT_EQ(result.equal_mem_slots, 0);  // 2 slots x 2 banks spread over 10 layers
  const auto get = [&](std::string_view p) {
    for (const auto& s : result.results) {
      if (s.policy == p) return s;
    }
    throw Error("missing");
  };
  EXPECT_DOUBLE_EQ(get("none").extra_memory_bytes, 0);
  EXPECT_DOUBLE_EQ(get("eplb").extra_memory_bytes, 2 * 10 * 1e6);
  EXPECT_DOUBLE_EQ(get("eplb-window").extra_memory_bytes, 2 * 10 * 1e6);
  EXPECT_DOUBLE_EQ(get("eplb-equal-mem").extra_memory_bytes, 0);
  EXPECT_DOUBLE_EQ(get("halo-q").extra_memory_bytes, 2 * 2 * 1e6);
  EXPECT_LT(get("oracle").extra_memory_bytes, 0);               // undefined
  EXPECT_DOUBLE_EQ(get("eplb").moved_bytes_per_invocation, 0);  // installed once
  // eplb-window re-plans every iteration after a moving hot expert: it installs copies.
  EXPECT_GT(get("eplb-window").installed_copies, 0);
  EXPECT_DOUBLE_EQ(get("eplb-window").moved_bytes_per_invocation,
                   get("eplb-window").installed_copies * 1e6);
  const auto& h = get("halo-q");
  EXPECT_DOUBLE_EQ(h.moved_bytes_per_invocation, (h.remote_copies + h.resident_copies) * 1e6);
  config.cost_model.reset();
  testing::expect_error([&] { run_replay(source, config); }, {"eplb-equal-mem", "--model"});
}

TEST(ReplayWarmup, EplbWindowReplansEveryInterval) {
  // The hot expert moves every iteration, so every re-plan installs copies and no other does.
  const ShiftingSource source(16, 1, {});
  ReplayConfig config = small_config();
  config.policies = {"eplb-window"};
  config.policy_options.eplb_window = 2;
  config.iterations = 6;
  config.policy_options.eplb_interval = 1;
  const auto every = run_replay(source, config);
  config.policy_options.eplb_interval = 3;
  const auto third = run_replay(source, config);
  EXPECT_EQ(every.warmup_iterations, 2);
  EXPECT_GT(every.results[0].installed_copies, 0);
  // Re-plans at served invocations 3 and 6 of 0..7 fall inside the measured 2..7: 2 of 6 against
  // 6 of 6, each installing the same kind of layout change.
  EXPECT_LT(third.results[0].installed_copies, every.results[0].installed_copies);
  EXPECT_GT(third.results[0].installed_copies, 0);
  EXPECT_NE(third.results[0].mean_r, every.results[0].mean_r);
}

TEST(ReplayCosts, PresetsHaveTheModelsExpertBytes) {
  // NVFP4: 3 * He * I * 0.5625 bytes.
  EXPECT_DOUBLE_EQ(find_replay_cost_model("DeepSeek-V4-Pro").expert_bytes,
                   3.0 * 7168 * 3072 * 0.5625);
  EXPECT_EQ(find_replay_cost_model("deepseek-v4-pro").num_moe_layers, 61);
  EXPECT_DOUBLE_EQ(find_replay_cost_model("deepseek-v4-flash").expert_bytes,
                   3.0 * 4096 * 2048 * 0.5625);
  testing::expect_error([] { find_replay_cost_model("gpt"); }, {"gpt", "deepseek-v4-flash"});
}

}  // namespace
}  // namespace iser
