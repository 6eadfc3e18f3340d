// The fused planner + rewrite kernel (GpuPlanner::plan_rewrite / plan_rewrite_all) == CPU planner
// (plan_halo_q, plan_iser) and rewrite_tokens, bit for bit, on the random and real-histogram
// inputs of the planner tests (planner_batches.h); CUDA-graph replays that must each see their own
// input (the generation stamps of the plan waits), and the status words of bad inputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "cuda/planner_kernels.h"
#include "gpu/planner_batches.h"
#include "gpu/routing_samples.h"
#include "iser/counts.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/planner.h"
#include "iser/rewrite.h"

namespace iser {
namespace {

using namespace planner_test;

BatchMode fused_mode() {
  BatchMode mode;
  mode.fused = true;
  return mode;
}

TEST(GpuPlanRewrite, MatchesCpuOnRandomSkewedTokens) {
  ISER_REQUIRE_GPUS(1);
  const int checked = check_random_inputs(variant, fused_mode());
  if (HasFailure()) return;
  std::printf("fused GPU == CPU on %d random inputs (plans and slot ids)\n", checked);
  if (test_scale() >= 1.0) {
    EXPECT_GE(checked, 100000);
  }
}

TEST(GpuPlanRewrite, MatchesCpuOnRealHistograms) {
  ISER_REQUIRE_GPUS(1);
  const std::string path = shared_data("dsv41-flash/coding.csv");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const int checked =
      check_real_histograms(gpu_test::read_histogram_csv(path), variant, fused_mode());
  std::printf("fused GPU == CPU on %d real-histogram inputs\n", checked);
}

// The iser planner in the fused kernel: plans that broadcast an expert more than once included.
TEST(GpuPlanRewriteIser, MatchesCpuOnRandomSkewedTokens) {
  ISER_REQUIRE_GPUS(1);
  g_iser_repeats = 0;
  g_iser_chains = 0;
  g_iser_top_ups = 0;
  const int checked = check_random_inputs(iser_variant, fused_mode());
  if (HasFailure()) return;
  std::printf(
      "fused GPU iser == CPU plan_iser + rewrite_tokens on %d random inputs (plans and slot ids; "
      "%d repeat an expert, %d level along chains, %d topped up)\n",
      checked, g_iser_repeats.load(), g_iser_chains.load(), g_iser_top_ups.load());
  if (test_scale() >= 1.0) {
    EXPECT_GE(checked, 100000);
    EXPECT_GT(g_iser_repeats.load(), 0);
  }
}

TEST(GpuPlanRewriteIser, MatchesCpuOnRealHistograms) {
  ISER_REQUIRE_GPUS(1);
  const std::string path = shared_data("dsv41-flash/coding.csv");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const int checked =
      check_real_histograms(gpu_test::read_histogram_csv(path), iser_variant, fused_mode());
  std::printf("fused GPU iser == CPU on %d real-histogram inputs\n", checked);
}

// One rank's routes of `num_inputs` inputs of one topology, with the CPU's counts.
struct RankInputs {
  std::vector<std::vector<int32_t>> ids;  // [input][P * n]
  std::vector<CountMatrix> counts;
};

RankInputs make_inputs(const Topology& topo, int tokens, int k, int num_inputs) {
  RankInputs in;
  for (int i = 0; i < num_inputs; ++i) {
    std::vector<int32_t> ids(static_cast<size_t>(topo.num_ranks) * tokens * k);
    gpu_test::sample_tokens(gpu_test::zipf_weights(topo.num_experts, 0.8 + 0.1 * i, 11 + i),
                            topo.num_ranks, tokens, k, 0.0, 11 + i, ids.data());
    in.counts.push_back(CountMatrix::from_topk(ids, topo.num_ranks, tokens, k, topo.num_experts));
    in.ids.push_back(std::move(ids));
  }
  return in;
}

// A graph of count -> plan_rewrite, replayed on different inputs copied into the same buffers:
// every replay must plan and rewrite its own input (a wait that matched an older generation would
// read the previous replay's plan), and direct launches between replays must not disturb them.
TEST(GpuPlanRewrite, GraphReplaysSeeTheirOwnInput) {
  ISER_REQUIRE_GPUS(1);
  const Topology topo = Topology::make(8, 384, 4);
  // 9000 routes: five tiles, the last one partial; a launch of this size splits each tile's slot
  // pass over four CTAs (PlanRewriteParams::num_parts) on any GPU with 21 SMs or more.
  const int tokens = 1500;
  const int k = 6;
  const int n = tokens * k;
  const int rank = 3;
  const int num_inputs = 6;
  const RankInputs in = make_inputs(topo, tokens, k, num_inputs);
  GpuPlanner planner(topo, n);
  DeviceBuffer<int32_t> d_ids(n);
  DeviceBuffer<int32_t> d_counts(size_t{8} * 384);
  DeviceBuffer<int32_t> d_plan(planner.plan_words());
  DeviceBuffer<int32_t> d_slots(n);
  int32_t* my_row =
      d_counts.ptr + static_cast<ptrdiff_t>(rank) * 384;  // recomputed in place by the graph

  cudaStream_t stream;
  ISER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ISER_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  planner.count(d_ids.ptr, tokens, k, my_row, stream);
  planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, tokens, k, rank, d_slots.ptr, stream);
  ISER_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ISER_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  int broadcasting = 0;
  for (int round = 0; round < 2 * num_inputs; ++round) {
    const int i = round % num_inputs;
    const int32_t* ids = in.ids[i].data() + static_cast<size_t>(rank) * n;
    ISER_CUDA_CHECK(
        cudaMemcpyAsync(d_ids.ptr, ids, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
    ISER_CUDA_CHECK(cudaMemcpyAsync(d_counts.ptr, in.counts[i].data().data(),
                                    sizeof(int32_t) * 8 * 384, cudaMemcpyHostToDevice, stream));
    ISER_CUDA_CHECK(cudaMemsetAsync(d_slots.ptr, 0xff, sizeof(int32_t) * n, stream));
    if (round % 3 == 2) {  // a direct launch between replays advances the same sync words
      planner.count(d_ids.ptr, tokens, k, my_row, stream);
      planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, tokens, k, rank, d_slots.ptr,
                           stream);
    } else {
      ISER_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    }
    ISER_CUDA_CHECK(cudaStreamSynchronize(stream));
    ASSERT_EQ(planner.read_errors(), 0u) << "round " << round;
    const Plan cpu = plan_halo_q(topo, in.counts[i]);
    broadcasting += cpu.broadcasts.empty() ? 0 : 1;
    ASSERT_TRUE(download_plan(planner.layout(), d_plan.ptr) == cpu) << "round " << round;
    std::vector<int32_t> want(n);
    rewrite_tokens(topo, in.counts[i], cpu, rank, std::span<const int32_t>(ids, n), k, want);
    ASSERT_EQ(d_slots.download(n), want) << "round " << round;
  }
  EXPECT_GE(broadcasting, num_inputs);  // the plans move routes (the rewrite is not all home)
  ISER_CUDA_CHECK(cudaGraphExecDestroy(exec));
  ISER_CUDA_CHECK(cudaGraphDestroy(graph));
  ISER_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(GpuPlanRewrite, ReportsBadInputsInStatusWords) {
  ISER_REQUIRE_GPUS(1);
  const Topology topo = Topology::make(4, 16, 2);
  GpuPlanner planner(topo, 64);
  // Ids out of range (16, -5): -1 slots and kGpuBadExpertId; the others are rewritten.
  const std::vector<int32_t> ids = {0, 1, 16, 2, -1, 3, -5, 4};
  DeviceBuffer<int32_t> d_ids(ids.size());
  DeviceBuffer<int32_t> d_row(16);
  DeviceBuffer<int32_t> d_counts(size_t{4} * 16);
  DeviceBuffer<int32_t> d_plan(planner.plan_words());
  DeviceBuffer<int32_t> d_slots(ids.size());
  d_ids.upload(ids);
  std::vector<int32_t> counts(size_t{4} * 16, 3);
  counts[0] = 40;  // skewed, so a valid matrix broadcasts expert 0
  planner.count(d_ids.ptr, 4, 2, d_row.ptr, nullptr);
  // Rank 0's row of the matrix is the counted one (its ids), so the tiles match the counts.
  const std::vector<int32_t> row = d_row.download(16);
  std::copy(row.begin(), row.end(), counts.begin());
  counts[0] = 40;  // rank 0's count of expert 0 no longer matches its ids: stale tiles
  d_counts.upload(counts);
  planner.clear_errors(nullptr);
  planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, 4, 2, 0, d_slots.ptr, nullptr);
  ASSERT_EQ(download_plan_status(d_plan.ptr), 0u);
  EXPECT_EQ(planner.read_errors(), static_cast<uint32_t>(kGpuBadExpertId | kGpuStaleTiles));
  const auto slots = d_slots.download(ids.size());
  EXPECT_EQ(slots[2], -1);
  EXPECT_EQ(slots[4], -1);
  EXPECT_EQ(slots[6], -1);

  // A negative count: the plan carries kGpuBadCounts and no broadcasts, the routes go home and
  // the rewrite reports kGpuPlanNotOk.
  counts[5] = -1;
  d_counts.upload(counts);
  planner.clear_errors(nullptr);
  planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, 4, 2, 0, d_slots.ptr, nullptr);
  EXPECT_EQ(download_plan_status(d_plan.ptr), static_cast<uint32_t>(kGpuBadCounts));
  EXPECT_EQ(d_plan.download(planner.plan_words())[GpuPlanLayout::kNumBroadcasts], 0);
  EXPECT_EQ(planner.read_errors() & kGpuPlanNotOk, static_cast<uint32_t>(kGpuPlanNotOk));
  const auto home = d_slots.download(ids.size());
  EXPECT_EQ(home[0], topo.home_slot(0));
  EXPECT_EQ(home[7], topo.home_slot(4));
  EXPECT_EQ(describe_gpu_status(kGpuPlanTimeout), "plan-timeout");

  // Host-side errors at once: a shape the last count() did not see, a rank out of range, more
  // plans than the last count() saw rows for.
  EXPECT_THROW(
      planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, 2, 2, 0, d_slots.ptr, nullptr),
      Error);
  EXPECT_THROW(
      planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, 4, 2, 4, d_slots.ptr, nullptr),
      Error);
  EXPECT_THROW(
      planner.plan_rewrite_all(d_counts.ptr, d_plan.ptr, d_ids.ptr, 4, 2, 1, d_slots.ptr, nullptr),
      Error);
  // The same shape checks for an iser planner (whose plans the GPU rewrites as well).
  GpuPlannerOptions iser;
  iser.iser = true;
  GpuPlanner iser_planner(topo, 64, iser);
  iser_planner.count(d_ids.ptr, 4, 2, d_row.ptr, nullptr);
  EXPECT_THROW(
      iser_planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, 2, 2, 0, d_slots.ptr, nullptr),
      Error);
  EXPECT_THROW(
      iser_planner.plan_rewrite(d_counts.ptr, d_plan.ptr, d_ids.ptr, 4, 2, 4, d_slots.ptr, nullptr),
      Error);
}

}  // namespace
}  // namespace iser
