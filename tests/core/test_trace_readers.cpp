// JSONL, CSV, SGLang and TensorRT-LLM readers on small fixtures, and on the real recordings in
// ../shared/data (skipped when absent).
#include <gtest/gtest.h>

#include "core/trace/safetensors.h"
#include "iser/trace.h"
#include "trace_test_util.h"

namespace iser {
namespace {

using testing::expect_error;
using testing::ScratchDir;
using testing::write_text;

TraceOptions ek(int e, int k) {
  TraceOptions o;
  o.num_experts = e;
  o.top_k = k;
  return o;
}

// Mixtral-style rows: token 1 of problem 0 is missing from layer 1 and must be dropped.
constexpr const char* kMixtral =
    R"({"problem_id": 0, "layer": 0, "token_idx": 0, "experts": [1, 2]}
{"problem_id": 0, "layer": 0, "token_idx": 1, "experts": [3, 4]}
{"problem_id": 0, "layer": 0, "token_idx": 2, "experts": [5, 6]}
{"problem_id": 0, "layer": 1, "token_idx": 2, "experts": [7, 0]}
{"problem_id": 0, "layer": 1, "token_idx": 0, "experts": [0, 1]}
{"problem_id": 1, "layer": 1, "token_idx": 0, "experts": [2, 3], "dataset": "gsm8k"}
{"problem_id": 1, "layer": 0, "token_idx": 0, "experts": [4, 5]}
)";

TEST(JsonlReader, JoinsLayersAndDropsIncompleteTokens) {
  const auto d = parse_jsonl_trace(kMixtral, "m.jsonl", ek(8, 2));
  EXPECT_EQ(d.metadata.num_layers, 2);
  EXPECT_EQ(d.metadata.num_tokens, 3);
  EXPECT_EQ(d.metadata.skipped_tokens, 1);
  EXPECT_NE(d.metadata.notes.find("dropped 1 tokens"), std::string::npos);
  EXPECT_EQ(d.metadata.dataset, "gsm8k");
  // Order: problem 0 tokens 0, 2; problem 1 token 0. Layout [L, T, k].
  EXPECT_EQ(d.topk_ids, (std::vector<int32_t>{1, 2, 5, 6, 4, 5, 0, 1, 7, 0, 2, 3}));
  EXPECT_EQ(d.request_ids, (std::vector<int64_t>{0, 0, 1}));
}

TEST(JsonlReader, NeedsExpertsAndTopKFromMetaOrOptions) {
  expect_error([] { parse_jsonl_trace(kMixtral, "m.jsonl"); },
               {"m.jsonl", "num_experts", "never guessed"});
  TraceOptions only_e;
  only_e.num_experts = 8;
  expect_error([&] { parse_jsonl_trace(kMixtral, "m.jsonl", only_e); }, {"m.jsonl", "top_k"});
}

TEST(JsonlReader, ErrorsNameLineAndValue) {
  expect_error([] { parse_jsonl_trace("{\"layer\":0,\"experts\":[1,9]}\n", "x.jsonl", ek(8, 2)); },
               {"x.jsonl:1", "expert id 9", "[-1, 8)"});
  expect_error([] { parse_jsonl_trace("{\"layer\":0,\"experts\":[1,-3]}\n", "x.jsonl", ek(8, 2)); },
               {"x.jsonl:1", "expert id -3"});
  expect_error([] { parse_jsonl_trace("\n{\"layer\":0,\"experts\":[1]}\n", "x.jsonl", ek(8, 2)); },
               {"x.jsonl:2", "top_k = 2"});
  expect_error(
      [] { parse_jsonl_trace("{\"layer\":0,\"experts\":[1,2]}\n{oops\n", "x.jsonl", ek(8, 2)); },
      {"x.jsonl:2", "not valid JSON"});
  expect_error([] { parse_jsonl_trace("[1]\n", "x.jsonl", ek(8, 2)); }, {"x.jsonl:1", "array"});
  expect_error(
      [] {
        parse_jsonl_trace(
            "{\"layer\":0,\"token_idx\":3,\"experts\":[1,2]}\n{\"layer\":0,\"token_idx\":3,"
            "\"experts\":[1,2]}\n",
            "x.jsonl", ek(8, 2));
      },
      {"x.jsonl", "token_idx 3", "twice"});
  expect_error([] { parse_jsonl_trace("{\"layer\":-1,\"experts\":[1,2]}\n", "x.jsonl", ek(8, 2)); },
               {"x.jsonl:1", "layer -1"});
  expect_error([] { parse_jsonl_trace("\n\n", "x.jsonl", ek(8, 2)); },
               {"x.jsonl", "no route rows"});
  expect_error(
      [] { parse_jsonl_trace("{\"type\":\"weird\",\"experts\":[1,2]}\n", "x.jsonl", ek(8, 2)); },
      {"x.jsonl:1", "unknown row type 'weird'"});
}

// OLMoE-style: meta line, 3 profiling rows, then real rows.
constexpr const char* kOlmoe =
    R"({"type": "meta", "model_id": "m", "num_experts": 6, "top_k": 2}
{"type": "route", "req_id": "r0", "token_idx": 0, "layer": 0, "topk_ids": [1, 0], "topk_weights": [0.5, 0.5]}
{"type": "route", "req_id": "r0", "token_idx": 1, "layer": 0, "topk_ids": [1, 0], "topk_weights": [0.5, 0.5]}
{"type": "route", "req_id": "r0", "token_idx": 2, "layer": 0, "topk_ids": [1, 0], "topk_weights": [0.5, 0.5]}
{"type": "route", "req_id": "r0", "token_idx": 3, "layer": 0, "topk_ids": [4, 5], "topk_weights": [0.7, 0.3]}
{"type": "route", "req_id": "r0", "token_idx": 4, "layer": 0, "topk_ids": [1, 0], "topk_weights": [0.5, 0.5]}
)";

TEST(JsonlReader, MetaLineAndExplicitProfilingSkips) {
  const auto all = parse_jsonl_trace(kOlmoe, "o.jsonl");
  EXPECT_EQ(all.metadata.num_tokens, 5);  // nothing dropped unless asked
  EXPECT_EQ(all.metadata.skipped_tokens, 0);
  EXPECT_EQ(all.metadata.model, "m");
  TraceOptions profile;
  profile.skip_profile_rows = true;
  const auto heur = parse_jsonl_trace(kOlmoe, "o.jsonl", profile);
  EXPECT_EQ(heur.metadata.num_tokens, 2);  // the later equal-weight row is real and kept
  EXPECT_EQ(heur.metadata.skipped_tokens, 3);
  EXPECT_EQ(heur.topk_ids, (std::vector<int32_t>{4, 5, 1, 0}));
  TraceOptions rows;
  rows.skip_rows = 3;
  EXPECT_EQ(parse_jsonl_trace(kOlmoe, "o.jsonl", rows).topk_ids, heur.topk_ids);
  EXPECT_EQ(parse_jsonl_trace(kOlmoe, "o.jsonl", ek(7, 2)).metadata.num_experts, 7);  // override
  expect_error([] { parse_jsonl_trace(std::string(kOlmoe) + R"({"type":"meta"})", "o.jsonl"); },
               {"o.jsonl:7", "meta line"});
}

TEST(JsonlReader, OneRowPerTokenWithAllLayers) {
  const auto d = parse_jsonl_trace(
      "{\"topk_ids\": [[0, 1], [2, 3]]}\n{\"topk_ids\": [[4, 5], [6, 7]]}\n", "t.jsonl", ek(8, 2));
  EXPECT_EQ(d.metadata.num_layers, 2);
  EXPECT_EQ(d.topk_ids, (std::vector<int32_t>{0, 1, 4, 5, 2, 3, 6, 7}));
}

TEST(CsvReader, ReadsHistogramsAndRejectsBadRows) {
  const auto d = parse_csv_histograms("layer,e0,e1,e2\n0,1,2,3\r\n1,4,5,6\n", "h.csv", ek(3, 2));
  EXPECT_EQ(d.kind, TraceKind::kHistograms);
  EXPECT_EQ(d.histograms[0], (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  TraceOptions k_only;
  k_only.top_k = 2;
  EXPECT_EQ(parse_csv_histograms("layer,e0\n0,5\n", "h.csv", k_only).metadata.num_experts, 1);
  expect_error([&] { parse_csv_histograms("layer,e0\n0,5\n", "h.csv"); }, {"h.csv", "top_k"});
  expect_error([&] { parse_csv_histograms("lay,e0\n0,1\n", "h.csv", k_only); },
               {"h.csv:1", "header"});
  expect_error([&] { parse_csv_histograms("layer,e0,e2\n0,1,2\n", "h.csv", k_only); },
               {"h.csv:1", "'e2'"});
  expect_error([&] { parse_csv_histograms("layer,e0,e1\n0,1\n", "h.csv", k_only); },
               {"h.csv:2", "2 cells"});
  expect_error([&] { parse_csv_histograms("layer,e0,e1\n0,1,x\n", "h.csv", k_only); },
               {"h.csv:2", "e1", "'x'"});
  expect_error([&] { parse_csv_histograms("layer,e0,e1\n0,1,-4\n", "h.csv", k_only); },
               {"h.csv:2", "'-4'"});
  expect_error([&] { parse_csv_histograms("layer,e0,e1\n1,1,4\n", "h.csv", k_only); },
               {"h.csv:2", "layer column is '1'"});
  expect_error([&] { parse_csv_histograms("layer,e0,e1\n0,1,4\n", "h.csv", ek(3, 2)); },
               {"h.csv", "E = 2", "num_experts = 3"});
}

TEST(SglangReader, LayerAndIterationCounts) {
  TraceOptions k2;
  k2.top_k = 2;
  const auto h = parse_sglang_trace(R"({"logical_count": [[1, 2, 3], [4, 5, 6]]})", "s.json", k2);
  EXPECT_EQ(h.kind, TraceKind::kHistograms);
  EXPECT_EQ(h.metadata.num_experts, 3);
  EXPECT_EQ(h.histograms[0], (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const auto i = parse_sglang_trace(
      R"({"top_k": 2, "logical_count": [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[0, 0], [0, 1]]]})",
      "s.json");
  EXPECT_EQ(i.kind, TraceKind::kIterationCounts);
  EXPECT_EQ(i.num_iterations, 3);
  EXPECT_EQ(i.metadata.num_layers, 2);
  EXPECT_EQ(i.iteration_counts, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1}));
  expect_error([] { parse_sglang_trace(R"({"logical_count": [[1, 2]]})", "s.json"); },
               {"s.json", "top_k"});
  expect_error([&] { parse_sglang_trace(R"({"logical_count": [[1, 2], [3]]})", "s.json", k2); },
               {"s.json", "logical_count[1]", "E = 2"});
  expect_error([&] { parse_sglang_trace(R"({"logical_count": [[1, -2]]})", "s.json", k2); },
               {"s.json", "logical_count[0][1] = -2"});
  expect_error([&] { parse_sglang_trace(R"({"nothing": 1})", "s.json", k2); },
               {"s.json", "logical_count"});
  expect_error([&] { parse_sglang_trace(R"({"logical_count": )", "s.json", k2); },
               {"s.json", "not valid JSON"});
  expect_error(
      [&] { parse_sglang_trace(R"({"num_experts": 3, "logical_count": [[1, 2]]})", "s.json", k2); },
      {"s.json", "num_experts = 3", "2 entries"});
}

// A TensorRT-LLM expert-statistic dump: meta_info.json + rank<r>.safetensors with "<iter>_<layer>".
void write_trtllm(const std::filesystem::path& dir, int num_ranks, bool drop_one = false) {
  std::filesystem::create_directories(dir);
  write_text(dir / "meta_info.json", R"({"num_experts": 4, "num_experts_per_token": 2})");
  for (int r = 0; r < num_ranks; ++r) {
    std::vector<trace::TensorToWrite> tensors;
    for (const int it : {10, 11}) {
      for (const int layer : {3, 5}) {
        if (drop_one && r == 1 && it == 11 && layer == 5) continue;
        std::vector<int64_t> v;
        for (int e = 0; e < 4; ++e) v.push_back(1000 * r + 100 * (it - 10) + 10 * layer + e);
        tensors.push_back({fmt::format("{}_{}", it, layer), trace::DType::kI32, {4}, v});
      }
    }
    write_text(dir / fmt::format("rank{}.safetensors", r),
               trace::serialize_safetensors({}, tensors));
  }
}

TEST(TrtllmReader, PerIterationPerRankCounts) {
  ScratchDir dir;
  write_trtllm(dir / "dump", 2);
  const auto d = read_trace_data(dir / "dump");
  EXPECT_EQ(d.kind, TraceKind::kIterationCounts);
  EXPECT_EQ(d.num_iterations, 2);
  EXPECT_EQ(d.num_ranks, 2);
  EXPECT_EQ(d.metadata.num_layers, 2);
  EXPECT_EQ(d.metadata.top_k, 2);
  EXPECT_NE(d.metadata.notes.find("layer ids 3,5"), std::string::npos);
  // [I, L, P, E]: iteration 11 (index 1), layer 5 (index 1), rank 1, expert 2.
  EXPECT_EQ(d.iteration_counts[((1 * 2 + 1) * 2 + 1) * 4 + 2], 1000 + 100 + 50 + 2);
  EXPECT_EQ(d.iteration_counts[0], 30);

  write_trtllm(dir / "gap", 2, /*drop_one=*/true);
  expect_error([&] { read_trace_data(dir / "gap"); }, {"gap", "layer 5", "held by ranks 0 in"});
  write_trtllm(dir / "holes", 3);
  std::filesystem::remove(dir / "holes" / "rank1.safetensors");
  expect_error([&] { read_trace_data(dir / "holes"); }, {"holes", "none missing"});
  std::filesystem::create_directories(dir / "empty");
  write_text(dir / "empty" / "meta_info.json", R"({"num_experts_per_token": 2})");
  expect_error([&] { read_trace_data(dir / "empty"); }, {"meta_info.json", "num_experts"});
}

// ---- the real recordings ---------------------------------------------------------------------

std::filesystem::path real_dir() {
  return std::filesystem::path(ISER_SHARED_DIR) / "data" / "real";
}

TEST(RealData, MixtralJoinsOnProblemAndToken) {
  const auto path = real_dir() / "mixtral-8x7b-gsm8k.jsonl";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  const auto d = read_trace_data(path, ek(8, 2));
  EXPECT_EQ(d.metadata.num_layers, 32);
  EXPECT_EQ(d.metadata.num_tokens, 244);  // 247 distinct tokens, 3 missing in some layer
  EXPECT_EQ(d.metadata.skipped_tokens, 3);
  EXPECT_EQ(d.metadata.dataset, "gsm8k");
  EXPECT_EQ(d.topk_ids[0], 7);  // problem 0, layer 0, token 0: experts [7, 0]
  EXPECT_EQ(d.topk_ids[1], 0);
  const auto h = read_trace_data(real_dir() / "mixtral-8x7b-humaneval.jsonl", ek(8, 2));
  EXPECT_EQ(h.metadata.num_tokens, 333);
  EXPECT_EQ(h.metadata.skipped_tokens, 5);
}

TEST(RealData, OlmoeProfilingRowsAreSkippedOnlyWhenAsked) {
  const auto path = real_dir() / "olmoe-1b-7b-gsm8k-layer0.jsonl";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  const auto all = read_trace_data(path);
  EXPECT_EQ(all.metadata.num_tokens, 6519);
  EXPECT_EQ(all.metadata.num_experts, 64);
  EXPECT_EQ(all.metadata.top_k, 8);
  EXPECT_EQ(all.metadata.model, "allenai/OLMoE-1B-7B-0924");
  TraceOptions profile;
  profile.skip_profile_rows = true;
  const auto real = read_trace_data(path, profile);
  EXPECT_EQ(real.metadata.num_tokens, 4471);
  EXPECT_EQ(real.metadata.skipped_tokens, 2048);
  EXPECT_EQ(real.topk_ids[0], 45);  // token_idx 2048: [45, 57, ...]
  TraceOptions rows;
  rows.skip_rows = 2048;
  EXPECT_EQ(read_trace_data(path, rows).topk_ids, real.topk_ids);
}

TEST(RealData, BundledHistogramsMatchTheSharedCsv) {
  const auto csv = std::filesystem::path(ISER_SHARED_DIR) / "data" / "dsv41-flash" / "coding.csv";
  const auto bundled = read_trace_data(bundled_default_trace());
  EXPECT_EQ(bundled.metadata.model, "DeepSeek-V4.1-Flash");
  EXPECT_EQ(bundled.metadata.dataset, "coding");
  EXPECT_EQ(bundled.metadata.num_experts, 384);
  EXPECT_EQ(bundled.metadata.top_k, 6);
  EXPECT_EQ(bundled.metadata.num_layers, 40);
  ASSERT_EQ(bundled.categories, (std::vector<std::string>{"coding"}));
  for (int l = 0; l < 40; ++l) {
    int64_t sum = 0;
    for (int e = 0; e < 384; ++e) sum += bundled.histograms[0][l * 384 + e];
    EXPECT_EQ(sum, 68676) << "layer " << l;  // 11,446 tokens x 6
  }
  if (!std::filesystem::exists(csv)) GTEST_SKIP() << csv << " absent";
  TraceOptions k6;
  k6.top_k = 6;
  EXPECT_EQ(read_trace_data(csv, k6).histograms, bundled.histograms);
}

TEST(RealData, BundledPathHonoursTheEnvironment) {
  ScratchDir dir;
  ::setenv("ISER_DATA_DIR", dir.path().c_str(), 1);
  expect_error([] { bundled_default_trace(); }, {"ISER_DATA_DIR", "not found"});
  std::filesystem::copy_file(
      std::filesystem::path(ISER_DATA_DIR) / "dsv41-flash-coding.safetensors",
      dir / "dsv41-flash-coding.safetensors");
  EXPECT_EQ(bundled_default_trace(), dir / "dsv41-flash-coding.safetensors");
  ::unsetenv("ISER_DATA_DIR");
  EXPECT_TRUE(std::filesystem::exists(bundled_default_trace()));
}

}  // namespace
}  // namespace iser
