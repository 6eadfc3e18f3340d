// Routing-data ingestion and sampling speed (docs/benchmarks.md):
//   safetensors / JSONL ingestion (bytes/s, tokens/s), CountMatrix::from_topk (routes/s),
//   histogram sampling through RoutingSource::counts / tokens (routes/s), and the baseline a
//   straightforward implementation would use: std::discrete_distribution with rejection of
//   repeated experts, on the same histogram in the same run.
#include <random>
#include <set>
#include <string>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "iser/counts.h"
#include "iser/trace.h"

namespace {

constexpr int kTau = 8192;

// The bundled DeepSeek-V4.1-Flash histograms (E = 384, top-6); layer 20.
const iser::TraceData& bundled() {
  static const iser::TraceData data = iser::read_trace_data(iser::bundled_default_trace());
  return data;
}

std::vector<int64_t> layer_histogram(int layer) {
  const auto& d = bundled();
  const auto E = static_cast<size_t>(d.metadata.num_experts);
  return {d.histograms[0].begin() + layer * E, d.histograms[0].begin() + (layer + 1) * E};
}

// A token trace sampled from the bundled histograms: L layers x T tokens, top-6.
iser::TraceData sampled_trace(int num_layers, int num_tokens) {
  const auto source = iser::open_trace(iser::bundled_default_trace());
  iser::TraceData d;
  d.kind = iser::TraceKind::kTokens;
  d.metadata = source->metadata();
  d.metadata.num_layers = num_layers;
  d.metadata.num_tokens = num_tokens;
  for (int l = 0; l < num_layers; ++l) {
    const auto ids = source->tokens(l, 0, 1, num_tokens);
    d.topk_ids.insert(d.topk_ids.end(), ids.begin(), ids.end());
  }
  return d;
}

void BM_SafetensorsIngest(benchmark::State& state) {
  const auto data = sampled_trace(8, 65536);
  const std::string bytes = iser::serialize_trace(data);
  for (auto _ : state) {
    auto parsed = iser::parse_safetensors_trace(bytes, "bench");
    benchmark::DoNotOptimize(parsed.topk_ids.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * 65536,
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SafetensorsIngest)->Unit(benchmark::kMillisecond);

void BM_JsonlIngest(benchmark::State& state) {
  // Mixtral-style rows: one object per (token, layer).
  const int L = 8, T = 8192;
  const auto data = sampled_trace(L, T);
  std::string text;
  for (int l = 0; l < L; ++l) {
    for (int t = 0; t < T; ++t) {
      const int32_t* ids = data.topk_ids.data() + (static_cast<size_t>(l) * T + t) * 6;
      text += fmt::format(
          "{{\"dataset\": \"bench\", \"problem_id\": {}, \"layer\": {}, \"experts\": [{}], "
          "\"token_idx\": {}}}\n",
          t / 512, l, fmt::join(ids, ids + 6, ", "), t % 512);
    }
  }
  iser::TraceOptions options;
  options.num_experts = 384;
  options.top_k = 6;
  for (auto _ : state) {
    auto parsed = iser::parse_jsonl_trace(text, "bench", options);
    benchmark::DoNotOptimize(parsed.topk_ids.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * T, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_JsonlIngest)->Unit(benchmark::kMillisecond);

void BM_CountsFromTopk(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const auto source = iser::open_trace(iser::bundled_default_trace());
  const auto ids = source->tokens(20, 0, P, kTau);
  for (auto _ : state) {
    auto counts = iser::CountMatrix::from_topk(ids, P, kTau, 6, 384);
    benchmark::DoNotOptimize(counts.data().data());
  }
  state.counters["routes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * P * kTau * 6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CountsFromTopk)->Arg(8)->Unit(benchmark::kMillisecond);

// The sampling rule through the public API, counts without materialising tokens.
void BM_SampleCounts(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const auto source = iser::open_trace(iser::bundled_default_trace());
  int64_t iteration = 0;
  for (auto _ : state) {
    auto counts = source->counts(20, iteration++, P, kTau);
    benchmark::DoNotOptimize(counts.data().data());
  }
  state.counters["routes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * P * kTau * 6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SampleCounts)->Arg(8)->Arg(24)->Unit(benchmark::kMillisecond);

void BM_SampleTokens(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const auto source = iser::open_trace(iser::bundled_default_trace());
  int64_t iteration = 0;
  for (auto _ : state) {
    auto ids = source->tokens(20, iteration++, P, kTau);
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["routes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * P * kTau * 6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SampleTokens)->Arg(8)->Unit(benchmark::kMillisecond);

// Baseline: std::discrete_distribution + std::mt19937_64, redraw repeated experts.
void BM_BaselineDiscreteDistribution(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const auto hist = layer_histogram(20);
  std::discrete_distribution<int> dist(hist.begin(), hist.end());
  std::mt19937_64 rng(1);
  iser::CountMatrix counts(P, 384);
  for (auto _ : state) {
    for (int r = 0; r < P; ++r) {
      auto row = counts.row(r);
      for (int t = 0; t < kTau; ++t) {
        int chosen[6];
        int n = 0;
        while (n < 6) {
          const int e = dist(rng);
          if (std::find(chosen, chosen + n, e) == chosen + n) chosen[n++] = e;
        }
        for (const int e : chosen) ++row[e];
      }
    }
    benchmark::DoNotOptimize(counts.data().data());
  }
  state.counters["routes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * P * kTau * 6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BaselineDiscreteDistribution)->Arg(8)->Unit(benchmark::kMillisecond);

// One iteration of the default replay: 40 layers x EP4/8/16/24 x 8192 tokens x top-6 (102 M
// routes), as counts.
void BM_DefaultReplayIteration(benchmark::State& state) {
  const auto source = iser::open_trace(iser::bundled_default_trace());
  int64_t iteration = 0;
  for (auto _ : state) {
    for (const int P : {4, 8, 16, 24}) {
      for (int l = 0; l < 40; ++l) {
        auto counts = source->counts(l, iteration, P, kTau);
        benchmark::DoNotOptimize(counts.data().data());
      }
    }
    ++iteration;
  }
  state.counters["routes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 40 * 52 * kTau * 6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DefaultReplayIteration)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_MixedCounts(benchmark::State& state) {
  iser::SyntheticOptions o;
  o.kind = "mixed";
  const auto source = iser::make_synthetic(o);
  int64_t iteration = 0;
  for (auto _ : state) {
    auto counts = source->counts(0, iteration++, 8, kTau);
    benchmark::DoNotOptimize(counts.data().data());
  }
  state.counters["routes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 8 * kTau * 6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MixedCounts)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
