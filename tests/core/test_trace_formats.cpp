// Canonical safetensors: round trips for every tensor kind and dtype, and every error path.
#include <gtest/gtest.h>

#include "core/trace/safetensors.h"
#include "iser/trace.h"
#include "trace_test_util.h"

namespace iser {
namespace {

using testing::expect_error;
using testing::le_bytes;
using testing::raw_safetensors;
using testing::ScratchDir;
using testing::write_text;

TraceMetadata meta(int e, int k) {
  TraceMetadata m;
  m.model = "test-model";
  m.dataset = "unit";
  m.num_experts = e;
  m.top_k = k;
  return m;
}

class TokenRoundTrip : public ::testing::TestWithParam<TraceDType> {};

TEST_P(TokenRoundTrip, WriteThenReadGivesTheSameTrace) {
  ScratchDir dir;
  const int L = 3, T = 5, k = 2, E = 300;
  std::vector<int32_t> ids(L * T * k);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % (E + 1)) - 1;
  const std::vector<int64_t> requests{0, 0, 1, 1, 7};
  write_token_trace(dir / "t.safetensors", meta(E, k), ids, L, T, requests, GetParam());
  const TraceData d = read_trace_data(dir / "t.safetensors");
  EXPECT_EQ(d.kind, TraceKind::kTokens);
  EXPECT_EQ(d.topk_ids, ids);
  EXPECT_EQ(d.request_ids, requests);
  EXPECT_EQ(d.metadata.num_layers, L);
  EXPECT_EQ(d.metadata.num_tokens, T);
  EXPECT_EQ(d.metadata.top_k, k);
  EXPECT_EQ(d.metadata.num_experts, E);
  EXPECT_EQ(d.metadata.model, "test-model");
  EXPECT_EQ(d.metadata.dataset, "unit");
}
INSTANTIATE_TEST_SUITE_P(Dtypes, TokenRoundTrip,
                         ::testing::Values(TraceDType::kInt16, TraceDType::kInt32));

class CountsRoundTrip : public ::testing::TestWithParam<TraceDType> {};

TEST_P(CountsRoundTrip, HistogramsWithCategories) {
  ScratchDir dir;
  const int L = 2, E = 4;
  const std::vector<std::string> cats{"coding", "math"};
  const std::vector<std::vector<int64_t>> hists{{1, 2, 3, 4, 5, 6, 7, 2000000000},
                                                {0, 0, 0, 1, 9, 9, 9, 9}};
  write_histograms(dir / "h.safetensors", meta(E, 2), cats, hists, L, GetParam());
  const TraceData d = read_trace_data(dir / "h.safetensors");
  EXPECT_EQ(d.kind, TraceKind::kHistograms);
  EXPECT_EQ(d.categories, cats);
  EXPECT_EQ(d.histograms, hists);
  EXPECT_EQ(d.metadata.top_k, 2);
}

TEST_P(CountsRoundTrip, IterationCountsWithAndWithoutRanks) {
  ScratchDir dir;
  const int I = 3, L = 2, P = 2, E = 4;
  std::vector<int64_t> per_rank(I * L * P * E);
  for (size_t i = 0; i < per_rank.size(); ++i) per_rank[i] = static_cast<int64_t>(i % 7);
  write_iteration_counts(dir / "r.safetensors", meta(E, 2), per_rank, I, L, P, GetParam());
  TraceData d = read_trace_data(dir / "r.safetensors");
  EXPECT_EQ(d.kind, TraceKind::kIterationCounts);
  EXPECT_EQ(d.num_ranks, P);
  EXPECT_EQ(d.num_iterations, I);
  EXPECT_EQ(d.iteration_counts, per_rank);

  std::vector<int64_t> plain(per_rank.begin(), per_rank.begin() + I * L * E);
  write_iteration_counts(dir / "i.safetensors", meta(E, 2), plain, I, L, 0, GetParam());
  d = read_trace_data(dir / "i.safetensors");
  EXPECT_EQ(d.num_ranks, 0);
  EXPECT_EQ(d.iteration_counts, plain);
}
INSTANTIATE_TEST_SUITE_P(Dtypes, CountsRoundTrip,
                         ::testing::Values(TraceDType::kInt32, TraceDType::kInt64));

TEST(TraceWriter, RefusesValuesThatDoNotFitAndInvalidData) {
  ScratchDir dir;
  const std::vector<std::string> cats{""};
  const std::vector<std::vector<int64_t>> big{{int64_t{1} << 40, 1}};
  expect_error([&] { write_histograms(dir / "x", meta(2, 1), cats, big, 1, TraceDType::kInt32); },
               {"does not fit", "I32"});
  const std::vector<int32_t> ids{0, 5};
  expect_error([&] { write_token_trace(dir / "x", meta(4, 1), ids, 1, 2); },
               {"topk_ids[0, 1, 0] = 5", "[-1, 4)"});
}

TEST(TraceWriter, SerialisationIsDeterministicAndAligned) {
  TraceData d;
  d.kind = TraceKind::kHistograms;
  d.metadata = meta(3, 1);
  d.metadata.num_layers = 1;
  d.categories = {"a"};
  d.histograms = {{1, 2, 3}};
  const std::string a = serialize_trace(d);
  EXPECT_EQ(a, serialize_trace(d));
  uint64_t header_len = 0;
  std::memcpy(&header_len, a.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
}

// ---- error paths: every message names the file, the field and the value --------------------

constexpr const char* kGoodHeader =
    R"({"__metadata__":{"num_experts":"8","top_k":"2"},)"
    R"("topk_ids":{"dtype":"I32","shape":[1,2,2],"data_offsets":[0,16]}})";

std::string good_ids_data() {
  return le_bytes<int32_t>({0, 1, 2, 3});
}

TEST(TraceErrors, GoodBaselineParses) {
  const auto d = parse_safetensors_trace(raw_safetensors(kGoodHeader, good_ids_data()), "f");
  EXPECT_EQ(d.topk_ids, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(TraceErrors, TruncatedFiles) {
  const std::string full = raw_safetensors(kGoodHeader, good_ids_data());
  expect_error([&] { parse_safetensors_trace(full.substr(0, 5), "trunc.st"); },
               {"trunc.st", "too short"});
  expect_error([&] { parse_safetensors_trace(full.substr(0, 40), "trunc.st"); },
               {"trunc.st", "header length"});
  expect_error([&] { parse_safetensors_trace(full.substr(0, full.size() - 3), "trunc.st"); },
               {"trunc.st", "topk_ids", "data_offsets [0, 16]", "13-byte"});
}

TEST(TraceErrors, BadHeaderJson) {
  expect_error([&] { parse_safetensors_trace(raw_safetensors("{\"a\":", ""), "bad.st"); },
               {"bad.st", "not valid JSON"});
  expect_error([&] { parse_safetensors_trace(raw_safetensors("[1,2]", ""), "bad.st"); },
               {"bad.st", "array"});
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(R"({"__metadata__":{"num_experts":8}})", ""),
                                "bad.st");
      },
      {"bad.st", "__metadata__.num_experts", "string"});
  expect_error(
      [&] {
        parse_safetensors_trace(
            raw_safetensors(R"({"__metadata__":{"num_experts":"eight","top_k":"2"},)"
                            R"("topk_ids":{"dtype":"I32","shape":[1,2,2],"data_offsets":[0,16]}})",
                            good_ids_data()),
            "bad.st");
      },
      {"bad.st", "num_experts", "'eight'"});
}

TEST(TraceErrors, WrongDtype) {
  const std::string header = R"({"__metadata__":{"num_experts":"8","top_k":"2"},)"
                             R"("topk_ids":{"dtype":"F32","shape":[1,2,2],"data_offsets":[0,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(header, good_ids_data()), "d.st"); },
               {"d.st", "topk_ids", "F32", "I16/I32"});
  const std::string unknown =
      R"({"topk_ids":{"dtype":"Q7","shape":[1,2,2],"data_offsets":[0,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(unknown, good_ids_data()), "d.st"); },
               {"d.st", "unknown dtype 'Q7'"});
}

TEST(TraceErrors, ShapeMismatchOffsetsAndOverlap) {
  const std::string shape = R"({"__metadata__":{"num_experts":"8","top_k":"2"},)"
                            R"("topk_ids":{"dtype":"I32","shape":[1,3,2],"data_offsets":[0,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(shape, good_ids_data()), "s.st"); },
               {"s.st", "topk_ids", "[1,3,2]", "needs 24 bytes", "span 16"});
  const std::string rank = R"({"__metadata__":{"num_experts":"8","top_k":"2"},)"
                           R"("topk_ids":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(rank, good_ids_data()), "s.st"); },
               {"s.st", "topk_ids", "[4]", "[L, T, k]"});
  const std::string overlap = R"({"__metadata__":{"num_experts":"8","top_k":"2"},)"
                              R"("topk_ids":{"dtype":"I32","shape":[1,2,2],"data_offsets":[0,16]},)"
                              R"("request_id":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(overlap, good_ids_data()), "o.st"); },
               {"o.st", "overlap"});
  const std::string reversed = R"({"topk_ids":{"dtype":"I32","shape":[0],"data_offsets":[16,8]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(reversed, good_ids_data()), "o.st"); },
               {"o.st", "data_offsets [16, 8]"});
  const std::string huge =
      R"({"topk_ids":{"dtype":"I32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(huge, good_ids_data()), "o.st"); },
               {"o.st", "more elements"});
  const std::string negative =
      R"({"topk_ids":{"dtype":"I32","shape":[-1,4],"data_offsets":[0,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(negative, good_ids_data()), "o.st"); },
               {"o.st", "invalid shape entry -1"});
}

TEST(TraceErrors, ExpertIdsOutOfRange) {
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(kGoodHeader, le_bytes<int32_t>({0, 1, 8, 3})),
                                "ids.st");
      },
      {"ids.st", "topk_ids[0, 1, 0] = 8", "[-1, 8)"});
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(kGoodHeader, le_bytes<int32_t>({0, 1, 2, -2})),
                                "ids.st");
      },
      {"ids.st", "topk_ids[0, 1, 1] = -2"});
  // -1 is an empty choice, allowed.
  EXPECT_NO_THROW(parse_safetensors_trace(
      raw_safetensors(kGoodHeader, le_bytes<int32_t>({0, -1, 2, -1})), "ids.st"));
}

TEST(TraceErrors, MissingNumExpertsUnlessGiven) {
  const std::string header =
      R"({"topk_ids":{"dtype":"I32","shape":[1,2,2],"data_offsets":[0,16]}})";
  const std::string file = raw_safetensors(header, le_bytes<int32_t>({0, 1, 2, 200}));
  expect_error([&] { parse_safetensors_trace(file, "noe.st"); },
               {"noe.st", "__metadata__.num_experts", "never guessed"});
  TraceOptions options;
  options.num_experts = 256;
  const auto d = parse_safetensors_trace(file, "noe.st", options);
  EXPECT_EQ(d.metadata.num_experts, 256);
  options.num_experts = 100;  // 200 is then out of range, never silently widened
  expect_error([&] { parse_safetensors_trace(file, "noe.st", options); }, {"= 200"});
}

TEST(TraceErrors, HistogramShapeAndKindChecks) {
  const std::string counts =
      R"({"__metadata__":{"num_experts":"3","top_k":"1"},)"
      R"("expert_counts.x":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(counts, le_bytes<int64_t>({1, 2})), "h.st");
      },
      {"h.st", "expert_counts.x", "E = 2", "num_experts = 3"});
  const std::string negative =
      R"({"__metadata__":{"num_experts":"2","top_k":"1"},)"
      R"("expert_counts":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(negative, le_bytes<int64_t>({1, -2})), "h.st");
      },
      {"h.st", "element 1 = -2"});
  const std::string no_k =
      R"({"__metadata__":{"num_experts":"2"},)"
      R"("expert_counts":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(no_k, le_bytes<int64_t>({1, 2})), "h.st");
      },
      {"h.st", "__metadata__.top_k"});
  const std::string mixed =
      R"({"__metadata__":{"num_experts":"2","top_k":"1"},)"
      R"("expert_counts":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]},)"
      R"("topk_ids":{"dtype":"I32","shape":[1,1,1],"data_offsets":[16,20]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(
            raw_safetensors(mixed, le_bytes<int64_t>({1, 2}) + le_bytes<int32_t>({0})), "h.st");
      },
      {"h.st", "exactly one of"});
  const std::string stray =
      R"({"__metadata__":{"num_experts":"2","top_k":"1"},)"
      R"("expert_counts":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]},)"
      R"("junk":{"dtype":"I32","shape":[1],"data_offsets":[16,20]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(
            raw_safetensors(stray, le_bytes<int64_t>({1, 2}) + le_bytes<int32_t>({0})), "h.st");
      },
      {"h.st", "unexpected tensor 'junk'"});
}

TEST(TraceErrors, CountsAboveTwoToTheFortyAreRejected) {
  const std::string counts =
      R"({"__metadata__":{"num_experts":"2","top_k":"1"},)"
      R"("expert_counts":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(
            raw_safetensors(counts, le_bytes<int64_t>({1, (int64_t{1} << 40) + 1})), "big.st");
      },
      {"big.st", "element 1 = 1099511627777", "2^40"});
}

TEST(TraceErrors, TopKMismatch) {
  const std::string header = R"({"__metadata__":{"num_experts":"8","top_k":"3"},)"
                             R"("topk_ids":{"dtype":"I32","shape":[1,2,2],"data_offsets":[0,16]}})";
  expect_error([&] { parse_safetensors_trace(raw_safetensors(header, good_ids_data()), "k.st"); },
               {"k.st", "k = 2", "__metadata__.top_k = 3"});
}

TEST(TraceFormats, VllmGlobalExpertLoad) {
  const std::string header =
      R"({"__metadata__":{"top_k":"2"},)"
      R"("global_expert_load":{"dtype":"I64","shape":[2,3],"data_offsets":[0,48]}})";
  const auto d =
      parse_safetensors_trace(raw_safetensors(header, le_bytes<int64_t>({1, 2, 3, 4, 5, 6})), "v");
  EXPECT_EQ(d.kind, TraceKind::kHistograms);
  EXPECT_EQ(d.metadata.num_experts, 3);
  EXPECT_EQ(d.metadata.num_layers, 2);
  EXPECT_EQ(d.histograms[0], (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const std::string no_k =
      R"({"global_expert_load":{"dtype":"I64","shape":[2,3],"data_offsets":[0,48]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(no_k, le_bytes<int64_t>({1, 2, 3, 4, 5, 6})),
                                "v.st");
      },
      {"v.st", "top_k"});
  // A tensor whose name does not say what it holds is refused, never guessed.
  const std::string unnamed =
      R"({"__metadata__":{"top_k":"2"},)"
      R"("expert_load":{"dtype":"I64","shape":[2,3],"data_offsets":[0,48]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(unnamed, le_bytes<int64_t>({1, 2, 3, 4, 5, 6})),
                                "u.st");
      },
      {"u.st", "have: expert_load"});
}

TEST(TraceFormats, DetectsFormats) {
  ScratchDir dir;
  write_text(dir / "a.jsonl", "{}\n");
  write_text(dir / "b.csv", "layer,e0\n");
  write_text(dir / "c.json", "{}");
  write_text(dir / "d.safetensors", "");
  write_text(dir / "noext1", "layer,e0,e1\n0,1,2\n");
  write_text(dir / "noext2", "{\"logical_count\": [[1]]}");
  write_text(dir / "noext3", "{\"layer\": 0}\n");
  write_text(dir / "noext4", raw_safetensors(kGoodHeader, good_ids_data()));
  write_text(dir / "noext5", "garbage");
  std::filesystem::create_directories(dir / "trt");
  write_text(dir / "trt" / "meta_info.json", "{}");
  EXPECT_EQ(detect_trace_format(dir / "a.jsonl"), TraceFormat::kJsonl);
  EXPECT_EQ(detect_trace_format(dir / "b.csv"), TraceFormat::kCsv);
  EXPECT_EQ(detect_trace_format(dir / "c.json"), TraceFormat::kSglang);
  EXPECT_EQ(detect_trace_format(dir / "d.safetensors"), TraceFormat::kSafetensors);
  EXPECT_EQ(detect_trace_format(dir / "noext1"), TraceFormat::kCsv);
  EXPECT_EQ(detect_trace_format(dir / "noext2"), TraceFormat::kSglang);
  EXPECT_EQ(detect_trace_format(dir / "noext3"), TraceFormat::kJsonl);
  EXPECT_EQ(detect_trace_format(dir / "noext4"), TraceFormat::kSafetensors);
  EXPECT_EQ(detect_trace_format(dir / "trt"), TraceFormat::kTrtllm);
  expect_error([&] { detect_trace_format(dir / "noext5"); }, {"noext5", "--format"});
  expect_error([&] { detect_trace_format(dir / "missing"); }, {"missing", "no such file"});
  expect_error([&] { detect_trace_format(dir.path()); }, {"meta_info.json"});
  EXPECT_EQ(parse_trace_format("sglang"), TraceFormat::kSglang);
  expect_error([] { parse_trace_format("xml"); }, {"'xml'"});
}

}  // namespace
}  // namespace iser
