// CUDA-graph capture of the runtime transports (logical ranks, P = 4 and 8, two banks): one
// invocation (count exchange + replicate + READY gate + bank release) with device-side
// generations is captured once and replayed 120 times; every replay moves the next generation
// into the right bank, byte-exact, and READY says exactly 2g+1. Explicit (host) generations
// before and after the replays continue the same counter.
#include <gtest/gtest.h>

#include <random>

#include "runtime_test_util.h"

namespace iser::testing {
namespace {

constexpr int kReplays = 120;

RuntimeConfig graph_config(int num_ranks) {
  RuntimeConfig c;
  c.num_ranks = num_ranks;
  c.num_experts = num_ranks * 4;
  c.num_slots = 3;
  c.bundle = {50000, 1248};  // 7 slices, the last one partial
  c.num_layers = 1;
  c.num_banks = 2;
  c.copy_sms = 3;
  c.timeout_us = 2'000'000;
  return c;
}

void poison_bank(Runtime& rt, int bank) {
  const RuntimeConfig& c = rt.config();
  for (int i = 0; i < rt.num_local_ranks(); ++i) {
    ASSERT_EQ(cudaMemset(rt.helper_slot(i, bank, 0), kPoison,
                         static_cast<size_t>(c.num_slots) * c.bundle.slot_stride()),
              cudaSuccess);
  }
}

// Same groups and helpers, new experts (owners anywhere) and modes: the graph reads the op list
// from device memory at every replay.
void reshuffle(const RuntimeConfig& c, std::vector<CopyOp>& ops, std::mt19937& rng) {
  for (CopyOp& op : ops) {
    op.expert = static_cast<int>(rng() % c.num_experts);
    op.owner = op.expert / c.experts_per_rank();
    op.mode = rng() % 2 == 1 ? TransportMode::kSami : TransportMode::kOwnerDirect;
  }
}

class GraphReplay : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ISER_REQUIRE_GPUS(1);
    ISER_EXPECT_CUDA(cudaSetDevice(0));
    ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

TEST_P(GraphReplay, CapturedInvocationReplaysWithDeviceGenerations) {
  const RuntimeConfig c = graph_config(GetParam());
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  poison_helpers(*rt);
  const runtime::RegionLayout layout = runtime::make_region_layout(c);
  std::mt19937 rng(4242 + GetParam());
  std::vector<CopyOp> ops = random_ops(c, rng, 4 * c.num_slots);
  ASSERT_FALSE(ops.empty());
  const int num_ops = static_cast<int>(ops.size());
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> rows(c.num_ranks * c.num_experts);
  DeviceVector<int32_t> matrix(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_experts);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_slots);

  // Host generations first: 1..3.
  constexpr uint64_t kHostGenerations = 3;
  for (uint64_t g = 1; g <= kHostGenerations; ++g) {
    rt->exchange_counts(rows.get(), matrix.get(), g, stream_);
    rt->replicate(device_ops.get(), num_ops, 0, g, Transport::kPlan, stream_);
    rt->ready_gate(device_ops.get(), num_ops, g, slot_expert.get(), stream_);
    rt->release_bank(g, stream_);
  }
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
  for (int i = 0; i < c.num_ranks; ++i) EXPECT_EQ(rt->last_generation(i), kHostGenerations);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ISER_EXPECT_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  rt->exchange_counts(rows.get(), matrix.get(), kDeviceGeneration, stream_);
  rt->replicate(device_ops.get(), num_ops, 0, kDeviceGeneration, Transport::kPlan, stream_);
  rt->ready_gate(device_ops.get(), num_ops, kDeviceGeneration, slot_expert.get(), stream_);
  rt->release_bank(kDeviceGeneration, stream_);
  ISER_EXPECT_CUDA(cudaStreamEndCapture(stream_, &graph));
  ISER_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<uint64_t> last(static_cast<size_t>(c.num_ranks) * c.num_ranks, 0);
  for (int replay = 0; replay < kReplays; ++replay) {
    const uint64_t g = kHostGenerations + 1 + replay;
    const int bank = rt->bank_of(g);
    reshuffle(c, ops, rng);
    device_ops.upload(ops);
    std::vector<int32_t> host_rows(c.num_ranks * c.num_experts);
    for (auto& v : host_rows) v = static_cast<int32_t>(rng() % 100000);
    rows.upload(host_rows);
    poison_bank(*rt, bank);
    ISER_EXPECT_CUDA(cudaDeviceSynchronize());

    ISER_EXPECT_CUDA(cudaGraphLaunch(exec, stream_));
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));

    for (int r = 0; r < c.num_ranks; ++r) {
      ASSERT_EQ(rt->last_generation(r), g) << "rank " << r;
      const auto flags = read_flags(*rt, r, layout.ready_flags);
      const auto consumed = read_flags(*rt, r, layout.consumed_flags);
      for (int w = 0; w < c.num_ranks; ++w) {
        ASSERT_EQ(flags[w], 2 * g + 1) << "READY on rank " << r << " of writer " << w;
        ASSERT_GT(flags[w], last[r * c.num_ranks + w]);
        last[r * c.num_ranks + w] = flags[w];
        ASSERT_EQ(consumed[w], g) << "bank release on rank " << r << " by " << w;
      }
    }
    expect_bank(*rt, ops, 0, bank, "graph replay");
    ASSERT_FALSE(::testing::Test::HasFailure()) << "replay " << replay << " generation " << g;
    const auto want = expected_slot_expert(c, ops);
    const auto got = slot_expert.download();
    for (int i = 0; i < c.num_ranks; ++i) {
      ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + i * want.size()))
          << "slot_expert of rank " << i << " generation " << g;
    }
    const auto got_matrix = matrix.download();
    for (int i = 0; i < c.num_ranks; ++i) {
      ASSERT_TRUE(
          std::equal(host_rows.begin(), host_rows.end(), got_matrix.begin() + i * host_rows.size()))
          << "count matrix of rank " << i << " epoch " << g;
    }
  }
  ISER_EXPECT_CUDA(cudaGraphExecDestroy(exec));
  ISER_EXPECT_CUDA(cudaGraphDestroy(graph));

  // Host generations continue after the replays.
  const uint64_t g = kHostGenerations + kReplays + 1;
  poison_bank(*rt, rt->bank_of(g));
  rt->exchange_counts(rows.get(), matrix.get(), g, stream_);
  rt->replicate(device_ops.get(), num_ops, 0, g, Transport::kP2PSami, stream_);
  rt->ready_gate(device_ops.get(), num_ops, g, slot_expert.get(), stream_, Transport::kP2PSami);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
  expect_bank(*rt, ops, 0, rt->bank_of(g), "host generation after the replays");
  for (int r = 0; r < c.num_ranks; ++r) {
    for (uint64_t v : read_flags(*rt, r, layout.ready_flags)) EXPECT_EQ(v, 2 * g + 1);
  }
  rt->check_status();
}

INSTANTIATE_TEST_SUITE_P(P, GraphReplay, ::testing::Values(4, 8));

TEST(GraphReplayLimits, CopyEngineNeedsExplicitGenerations) {
  ISER_REQUIRE_GPUS(1);
  auto rt = Runtime::logical(graph_config(4));
  try {
    rt->replicate_copy_engine({}, 0, kDeviceGeneration, nullptr);
    FAIL() << "copy-engine with kDeviceGeneration was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("explicit generation"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace iser::testing
