// Property tests (rapidcheck) for the routing-data layer.
#include <set>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "iser/error.h"
#include "iser/trace.h"
#include "trace_test_util.h"

namespace iser {
namespace {

// Ids in [-1, E) derived from raw values, repeated cyclically.
TraceData random_tokens(int L, int T, int k, int E, const std::vector<int32_t>& raw) {
  auto d = testing::make_token_trace(L, T, k, E, [&](size_t i) {
    const int64_t r = raw.empty() ? 0 : raw[i % raw.size()];
    return static_cast<int32_t>((r % (E + 1) + E + 1) % (E + 1)) - 1;
  });
  d.metadata.model = "prop";
  return d;
}

RC_GTEST_PROP(TraceProps, TokenTracesRoundTrip, ()) {
  const int L = *rc::gen::inRange(1, 5);
  const int T = *rc::gen::inRange(0, 40);
  const int k = *rc::gen::inRange(1, 9);
  const int E = *rc::gen::inRange(1, 2000);
  const auto raw = *rc::gen::container<std::vector<int32_t>>(rc::gen::arbitrary<int32_t>());
  const bool narrow = *rc::gen::arbitrary<bool>();
  const TraceData d = random_tokens(L, T, k, E, raw);
  const std::string bytes = serialize_trace(d, narrow ? TraceDType::kInt16 : TraceDType::kInt32);
  const TraceData back = parse_safetensors_trace(bytes, "prop");
  RC_ASSERT(back.topk_ids == d.topk_ids);
  RC_ASSERT(back.metadata.num_tokens == T);
  RC_ASSERT(back.metadata.num_experts == E);
  RC_ASSERT(back.metadata.model == "prop");
}

RC_GTEST_PROP(TraceProps, HistogramsRoundTrip, ()) {
  const int L = *rc::gen::inRange(1, 4);
  const int E = *rc::gen::inRange(1, 50);
  const int categories = *rc::gen::inRange(1, 4);
  TraceData d;
  d.kind = TraceKind::kHistograms;
  d.metadata.num_experts = E;
  d.metadata.top_k = 1;
  d.metadata.num_layers = L;
  for (int c = 0; c < categories; ++c) {
    d.categories.push_back("c" + std::to_string(c));
    d.histograms.push_back(*rc::gen::container<std::vector<int64_t>>(
        static_cast<size_t>(L * E), rc::gen::inRange<int64_t>(0, int64_t{1} << 40)));
  }
  const auto back = parse_safetensors_trace(serialize_trace(d), "prop");
  RC_ASSERT(back.histograms == d.histograms);
  RC_ASSERT(back.categories == d.categories);
}

// Any corruption of a valid file either parses into valid data or throws iser::Error.
RC_GTEST_PROP(TraceProps, CorruptedFilesFailCleanly, ()) {
  const TraceData d = random_tokens(2, 6, 2, 16, {3, 1, 4, 1, 5, 9, 2, 6});
  std::string bytes = serialize_trace(d);
  const auto flips = *rc::gen::container<std::vector<std::pair<size_t, uint8_t>>>(
      rc::gen::pair(rc::gen::inRange<size_t>(0, bytes.size()), rc::gen::arbitrary<uint8_t>()));
  for (const auto& [pos, value] : flips) bytes[pos] = static_cast<char>(value);
  const size_t cut = *rc::gen::inRange<size_t>(0, bytes.size() + 1);
  bytes.resize(cut);
  try {
    const auto back = parse_safetensors_trace(bytes, "corrupt");
    back.validate("corrupt");
  } catch (const Error&) {
  }
}

RC_GTEST_PROP(TraceProps, SampledTokensAreDistinctAndSupported, ()) {
  const int E = *rc::gen::inRange(1, 64);
  const int k = *rc::gen::inRange(1, 9);
  auto weights = *rc::gen::container<std::vector<int64_t>>(
      static_cast<size_t>(E),
      rc::gen::weightedOneOf<int64_t>({{3, rc::gen::just<int64_t>(0)},
                                       {6, rc::gen::inRange<int64_t>(1, 1000)},
                                       {1, rc::gen::inRange<int64_t>(1, int64_t{1} << 40)}}));
  TraceData d;
  d.kind = TraceKind::kHistograms;
  d.metadata.num_experts = E;
  d.metadata.top_k = k;
  d.metadata.num_layers = 1;
  d.categories = {""};
  d.histograms = {weights};
  TraceOptions o;
  o.seed = *rc::gen::arbitrary<uint64_t>();
  const auto src = make_routing_source(d, o);
  const int P = *rc::gen::inRange(1, 5);
  const int tau = *rc::gen::inRange(0, 50);
  const auto ids = src->tokens(0, *rc::gen::inRange<int64_t>(0, 1000), P, tau);
  int nonzero = 0;
  for (const int64_t w : weights) nonzero += w > 0 ? 1 : 0;
  for (int t = 0; t < P * tau; ++t) {
    std::set<int32_t> seen;
    int empty = 0;
    for (int c = 0; c < k; ++c) {
      const int32_t e = ids[static_cast<size_t>(t) * k + c];
      if (e == -1) {
        ++empty;
        continue;
      }
      RC_ASSERT(e >= 0 && e < E);
      RC_ASSERT(weights[e] > 0);
      RC_ASSERT(seen.insert(e).second);
    }
    RC_ASSERT(empty == k - std::min(k, nonzero));
  }
}

RC_GTEST_PROP(TraceProps, BatchingPartitionsThePrefix, ()) {
  const int T = *rc::gen::inRange(1, 200);
  const int k = *rc::gen::inRange(1, 4);
  const TraceData d = random_tokens(2, T, k, 32, {7, 11, 13, 17, 19, 23, 29});
  const auto src = make_routing_source(d);
  const int P = *rc::gen::inRange(1, 6);
  const int tau = *rc::gen::inRange(1, 20);
  const int64_t iterations = *src->num_iterations(P, tau);
  RC_ASSERT(iterations == T / (P * tau));
  RC_ASSERT(src->dropped_tokens(P, tau) == T - iterations * P * tau);
  std::vector<int32_t> joined;
  for (int64_t i = 0; i < iterations; ++i) {
    const auto ids = src->tokens(1, i, P, tau);
    joined.insert(joined.end(), ids.begin(), ids.end());
  }
  const auto layer1 = d.topk_ids.begin() + static_cast<ptrdiff_t>(T) * k;
  RC_ASSERT(std::equal(joined.begin(), joined.end(), layer1));
}

}  // namespace
}  // namespace iser
