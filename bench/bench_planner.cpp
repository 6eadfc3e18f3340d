// CPU planner speed: plans per second at EP8/16/32/64, E = 384, S = 4, on Zipf
// (alpha 0.8) routing counts, 8,192 tokens/rank, top-6. Baselines in the same run: the `none`
// policy (home loads only) and the count-level route rewrite.
//
//   build/bench/bench_planner --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <vector>

#include "core/planner/synthetic_counts.h"
#include "iser/planner.h"
#include "iser/policy.h"
#include "iser/rewrite.h"

namespace iser {
namespace {

constexpr int kExperts = 384;
constexpr int kSlots = 4;
constexpr int kMatrices = 8;

const std::vector<CountMatrix>& counts_for(int num_ranks) {
  static std::vector<std::vector<CountMatrix>> cache(129);
  auto& sets = cache[num_ranks];
  if (sets.empty()) {
    for (int i = 0; i < kMatrices; ++i) {
      testing::ZipfOptions o;
      o.num_ranks = num_ranks;
      o.num_experts = kExperts;
      o.tokens_per_rank = 8192;
      o.top_k = 6;
      o.alpha = 0.8;
      o.seed = 1 + i;  // a different expert order per matrix (as per layer)
      sets.push_back(testing::zipf_counts(o));
    }
  }
  return sets;
}

// One planner entry point (plan_halo_q or plan_iser) with a reused workspace and plan.
using PlannerFn = void (*)(const Topology&, const CountMatrix&, const HaloQOptions&,
                           PlannerWorkspace&, Plan&);

void BM_Planner(benchmark::State& state, PlannerFn planner) {
  const int P = static_cast<int>(state.range(0));
  const auto topo = Topology::make(P, kExperts, kSlots);
  const auto& sets = counts_for(P);
  PlannerWorkspace ws;
  Plan plan;
  size_t i = 0;
  for (auto _ : state) {
    planner(topo, sets[i++ % sets.size()], {}, ws, plan);
    benchmark::DoNotOptimize(plan.broadcasts.data());
  }
  state.counters["plans/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_Policy(benchmark::State& state, const char* name) {
  const int P = static_cast<int>(state.range(0));
  const auto topo = Topology::make(P, kExperts, kSlots);
  const auto& sets = counts_for(P);
  auto policy = make_policy(name, topo);
  size_t i = 0;
  for (auto _ : state) {
    auto result = policy->plan(sets[i++ % sets.size()]);
    benchmark::DoNotOptimize(result.flows.data());
  }
  state.counters["plans/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_RewriteFlows(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const auto topo = Topology::make(P, kExperts, kSlots);
  const auto& sets = counts_for(P);
  std::vector<Plan> plans;
  for (const auto& c : sets) plans.push_back(plan_halo_q(topo, c));
  size_t i = 0;
  for (auto _ : state) {
    const size_t k = i++ % sets.size();
    auto flows = rewrite_flows(topo, sets[k], plans[k]);
    benchmark::DoNotOptimize(flows.data());
  }
}

// plan_iser under heavy skew with scarce slots (E = 256, top-8, alpha 1.2, S = 2), where its
// slack candidates run: the policy's worst case for time.
void BM_IserHeavy(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const auto topo = Topology::make(P, 256, 2);
  std::vector<CountMatrix> sets;
  for (int i = 0; i < kMatrices; ++i) {
    testing::ZipfOptions o;
    o.num_ranks = P;
    o.num_experts = 256;
    o.alpha = 1.2;
    o.seed = 1 + i;
    sets.push_back(testing::zipf_counts(o));
  }
  PlannerWorkspace ws;
  Plan plan;
  size_t i = 0;
  for (auto _ : state) {
    plan_iser(topo, sets[i++ % sets.size()], {}, ws, plan);
    benchmark::DoNotOptimize(plan.broadcasts.data());
  }
}

void ep_degrees(benchmark::internal::Benchmark* b) {
  for (const int p : {8, 16, 32, 64}) b->Arg(p);
}

BENCHMARK_CAPTURE(BM_Planner, halo_q, &plan_halo_q)->Apply(ep_degrees)->Name("plan_halo_q");
BENCHMARK_CAPTURE(BM_Planner, iser, &plan_iser)->Apply(ep_degrees)->Name("plan_iser");
BENCHMARK(BM_IserHeavy)->Apply(ep_degrees)->Name("plan_iser_heavy_s2");
BENCHMARK_CAPTURE(BM_Policy, none, "none")->Apply(ep_degrees)->Name("policy_none");
BENCHMARK_CAPTURE(BM_Policy, halo_q, "halo-q")->Apply(ep_degrees)->Name("policy_halo_q");
BENCHMARK(BM_RewriteFlows)->Apply(ep_degrees)->Name("rewrite_flows");

}  // namespace
}  // namespace iser

BENCHMARK_MAIN();
