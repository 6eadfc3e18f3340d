// The engine dumps of tests/cli/data/engines (built by make_fixtures.py the way each engine's
// writer builds them) convert to exactly the counts written, and the torch.save reader refuses
// what it must: code-executing globals, unknown opcodes, broken containers, out-of-range tensors.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/trace/pickle.h"
#include "core/trace/zip.h"
#include "iser/replay.h"
#include "trace_test_util.h"

namespace iser::testing {
namespace {

const std::filesystem::path kEngines =
    std::filesystem::path(ISER_SOURCE_DIR) / "tests" / "cli" / "data" / "engines";

nlohmann::json expected(const std::filesystem::path& fixture) {
  std::ifstream in(fixture.string() + ".expected.json");
  return nlohmann::json::parse(in);
}

// Flattens the expected nested arrays in row-major order.
void flatten(const nlohmann::json& j, std::vector<int64_t>& out) {
  if (j.is_array()) {
    for (const auto& v : j) flatten(v, out);
  } else {
    out.push_back(j.get<int64_t>());
  }
}

void expect_matches(const TraceData& d, const nlohmann::json& want) {
  EXPECT_EQ(d.metadata.num_experts, want["num_experts"].get<int>());
  EXPECT_EQ(d.metadata.num_layers, want["num_layers"].get<int>());
  std::vector<int64_t> flat;
  const std::string kind = want["kind"];
  if (kind == "tokens") {
    ASSERT_EQ(d.kind, TraceKind::kTokens);
    EXPECT_EQ(d.metadata.top_k, want["top_k"].get<int>());
    flatten(want["topk_ids"], flat);
    EXPECT_EQ(std::vector<int64_t>(d.topk_ids.begin(), d.topk_ids.end()), flat);
  } else if (kind == "histograms") {
    ASSERT_EQ(d.kind, TraceKind::kHistograms);
    flatten(want["counts"], flat);
    EXPECT_EQ(d.histograms.at(0), flat);
  } else {
    ASSERT_EQ(d.kind, TraceKind::kIterationCounts);
    EXPECT_EQ(d.num_ranks > 0, kind == "iteration_rank_counts");
    EXPECT_EQ(d.num_iterations, static_cast<int64_t>(want["counts"].size()));
    flatten(want["counts"], flat);
    EXPECT_EQ(d.iteration_counts, flat);
  }
}

TraceOptions top_k(int k) {
  TraceOptions o;
  o.top_k = k;
  return o;
}

TEST(EngineDumps, SglangStatDropsUnusedRowsAndKeepsTheDenseLayer) {
  const auto path = kEngines / "expert_distribution_recorder_1764633600.5.pt";
  EXPECT_EQ(detect_trace_format(path), TraceFormat::kSglang);
  const TraceData d = read_trace_data(path, top_k(2));
  expect_matches(d, expected(path));
  EXPECT_NE(d.metadata.notes.find("5 unused buffer row(s) dropped"), std::string::npos);
  EXPECT_EQ(find_routeless_layers(d), std::vector<int>{0});
  // The stat dump has no k: asked for, never guessed.
  expect_error([&] { read_trace_data(path); }, {"1764633600.5.pt", "top_k"});
  // --format sglang on the .pt reads it too (not as JSON).
  expect_matches(read_trace_data(path, top_k(2), TraceFormat::kSglang), expected(path));
}

TEST(EngineDumps, SglangStatFullBufferKeptInStoredOrder) {
  const auto path = kEngines / "expert_distribution_recorder_1764633601.5.pt";
  const TraceData d = read_trace_data(path, top_k(2));
  expect_matches(d, expected(path));
  EXPECT_NE(d.metadata.notes.find("full"), std::string::npos);
}

TEST(EngineDumps, SglangPerPassRankDirectory) {
  const auto path = kEngines / "sglang_per_pass";
  EXPECT_EQ(detect_trace_format(path), TraceFormat::kSglang);
  const TraceData d = read_trace_data(path, top_k(2));
  expect_matches(d, expected(path));
  EXPECT_EQ(d.num_ranks, 2);
}

TEST(EngineDumps, SglangPerTokenMapsPhysicalIds) {
  const auto path = kEngines / "sglang_per_token";
  const TraceData d = read_trace_data(path);
  expect_matches(d, expected(path));
  EXPECT_EQ(find_routeless_layers(d), std::vector<int>{0});
}

TEST(EngineDumps, TrtllmAttentionDp) {
  const auto path = kEngines / "trtllm_adp";
  expect_matches(read_trace_data(path), expected(path));
  TraceOptions raw;
  raw.trtllm_raw = true;
  expect_matches(read_trace_data(path, raw), expected(path / "raw"));
}

TEST(EngineDumps, TrtllmPipelineParallel) {
  const auto path = kEngines / "trtllm_pp";
  const TraceData d = read_trace_data(path);
  expect_matches(d, expected(path));
  EXPECT_NE(d.metadata.notes.find("pipeline stages"), std::string::npos);
  TraceOptions raw;
  raw.trtllm_raw = true;
  expect_matches(read_trace_data(path, raw), expected(path / "raw"));
}

TEST(EngineDumps, TrtllmLoadBalancerSlots) {
  const auto path = kEngines / "trtllm_lb";
  TraceOptions o;
  o.num_experts = 8;
  expect_error([&] { read_trace_data(path, o); },
               {"meta_info.json", "num_experts = 10", "slots", "--slot-map"});
  o.slot_map = kEngines / "trtllm_lb_slot_map.json";
  expect_matches(read_trace_data(path, o), expected(path));
  o.trtllm_raw = true;
  expect_matches(read_trace_data(path, o), expected(path / "raw"));
  ScratchDir dir;
  write_text(dir / "short.json", R"({"1": [0, 1, 2]})");
  o.slot_map = dir / "short.json";
  expect_error([&] { read_trace_data(path, o); }, {"short.json", "layer 1", "10 expert ids"});
  write_text(dir / "gap.json", R"([0, 1, 2, 3, 4, 5, 6, 8, 0, 3])");
  o.slot_map = dir / "gap.json";
  o.num_experts.reset();
  expect_error([&] { read_trace_data(path, o); }, {"gap.json", "no copy of expert 7"});
}

TEST(EngineDumps, VllmTensorsByName) {
  for (const char* file :
       {"vllm_global_expert_load.safetensors", "vllm_global_expert_load.pt",
        "vllm_expert_load_window.safetensors", "vllm_expert_load_window_step.safetensors"}) {
    SCOPED_TRACE(file);
    expect_matches(read_trace_data(kEngines / file, top_k(2)), expected(kEngines / file));
  }
  TraceOptions e8;
  e8.num_experts = 8;
  const auto routed = kEngines / "vllm_routed_experts.safetensors";
  expect_matches(read_trace_data(routed, e8), expected(routed));
  expect_error([&] { read_trace_data(routed); }, {"routed_experts", "num_experts"});
  expect_error([&] { read_trace_data(kEngines / "vllm_unnamed.safetensors", top_k(2)); },
               {"vllm_unnamed.safetensors", "have: load", "global_expert_load"});
}

TEST(EngineDumps, VllmWindowNeedsItsMap) {
  const std::string header =
      R"({"expert_load_window":{"dtype":"I64","shape":[1,1,2],"data_offsets":[0,16]}})";
  expect_error(
      [&] {
        parse_safetensors_trace(raw_safetensors(header, le_bytes<int64_t>({1, 2})), "w.st");
      },
      {"w.st", "physical_to_logical_map"});
}

// ---- hostile torch.save files ------------------------------------------------------------------

std::string torch_file(const std::string& pickle, const std::string& storage = std::string(64, 0)) {
  return trace::write_stored_zip(
      {{"archive/data.pkl", pickle}, {"archive/data/0", storage}, {"archive/byteorder", "little"}});
}

std::string u32(uint32_t n) {
  return le_bytes<uint32_t>({n});
}
std::string str(const std::string& s) {
  return "X" + u32(static_cast<uint32_t>(s.size())) + s;
}
std::string k1(int v) {
  return std::string("K") + static_cast<char>(v);
}

// {"logical_count": tensor int32 [rows, 1, 2] over storage "0" of `numel` elements}.
std::string stat_pickle(int rows, int numel) {
  return std::string("\x80\x02}(") + str("logical_count") +
         "ctorch._utils\n_rebuild_tensor_v2\n((" + str("storage") + "ctorch\nIntStorage\n" +
         str("0") + str("cpu") + k1(numel) + "tQ" + k1(0) + k1(rows) + k1(1) + k1(2) + "\x87" +
         k1(2) + k1(2) + k1(1) + "\x87" + "\x89" + "ccollections\nOrderedDict\n)RtRu.";
}

TEST(TorchReader, ReadsAHandWrittenPickle) {
  std::string storage = le_bytes<int32_t>({1, 2, 0, 0, 3, 4});
  const TraceData d = parse_torch_trace(torch_file(stat_pickle(3, 6), storage), "h.pt", top_k(1));
  EXPECT_EQ(d.num_iterations, 2);
  EXPECT_EQ(d.iteration_counts, (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(TorchReader, RefusesWhatItMust) {
  const std::string good = stat_pickle(3, 6);
  // A global that would execute code.
  std::string evil = good;
  evil.replace(evil.find("collections\nOrderedDict"), 23, "os\nsystem");
  expect_error([&] { parse_torch_trace(torch_file(evil), "e.pt", top_k(1)); },
               {"e.pt", "global 'os.system' is not allowed"});
  // An opcode torch.save does not write (INST).
  expect_error([&] { parse_torch_trace(torch_file("\x80\x02i"), "o.pt"); },
               {"o.pt", "opcode 0x69"});
  // Truncated pickle, dangling memo reference, STOP with an empty stack.
  expect_error([&] { parse_torch_trace(torch_file(good.substr(0, 20)), "t.pt"); },
               {"t.pt", "truncated"});
  expect_error([&] { parse_torch_trace(torch_file("\x80\x02h\x05."), "m.pt"); },
               {"m.pt", "memo index 5"});
  expect_error([&] { parse_torch_trace(torch_file("\x80\x02."), "s.pt"); }, {"s.pt", "STOP"});
  // A tensor reaching past its storage (3 rows x 2 need 6 elements, the storage has 5).
  expect_error([&] { parse_torch_trace(torch_file(stat_pickle(3, 5)), "b.pt", top_k(1)); },
               {"b.pt", "storage of 5 elements"});
  // A storage larger than its data entry.
  expect_error([&] { parse_torch_trace(torch_file(good, std::string(8, 0)), "d.pt", top_k(1)); },
               {"d.pt", "needs 24 bytes, the entry has 8"});
  // Container damage: a flipped data byte fails the CRC; a cut file has no end record.
  std::string file = torch_file(good);
  file[file.find("logical_count")] ^= 1;
  expect_error([&] { parse_torch_trace(file, "c.pt"); }, {"c.pt", "CRC-32"});
  expect_error([&] { parse_torch_trace(torch_file(good).substr(0, 100), "z.pt"); },
               {"z.pt", "end-of-central-directory"});
  expect_error([&] { parse_torch_trace("PK\x03\x04 not really", "n.pt"); }, {"n.pt"});
  expect_error([&] { parse_torch_trace(std::string("\x80\x02}q\x00.", 6), "legacy.pt"); },
               {"legacy.pt", "legacy"});
}

// ---- dense layers ------------------------------------------------------------------------------

TEST(EngineDumps, ReplayLeavesOutLayersWithoutRoutes) {
  const auto path = kEngines / "expert_distribution_recorder_1764633600.5.pt";
  const auto source = open_trace(path, top_k(2));
  EXPECT_EQ(source->metadata().routeless_layers, std::vector<int>{0});
  ReplayConfig config;
  config.ep_degrees = {2};
  config.tokens_per_rank = 16;
  config.policies = {"none"};
  config.num_threads = 1;
  EXPECT_EQ(run_replay(*source, config).layers, (std::vector<int>{1, 2, 3}));
  config.layers = {0, 1};  // an explicit selection is kept as given
  EXPECT_EQ(run_replay(*source, config).layers, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace iser::testing
