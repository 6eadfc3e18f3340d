// Reference EP MoE layer with one process per GPU (include/iser/moe_ep_layer.h): on 2 GPUs, ON
// (replicas over NVLink behind the READY gate) and OFF give bitwise-identical outputs, and stay
// identical across generations of the helper bank, and when a stalled copy makes the READY gate
// give up (the layer refills the slots from home bundles); a GPU plan that fails its checks runs
// the invocation unbalanced (OFF's output); a forward() that throws leaves the layer usable.
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <nccl.h>

#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/gpu_planner.h"
#include "iser/moe_ep_layer.h"
#include "iser/testing/hooks.h"
#include "moe_test_util.h"
#include "multiprocess_util.h"

namespace iser::moe {

using cuda::DeviceBuffer;
namespace {

using ::iser::testing::child_env;
using ::iser::testing::RankEnv;
using ::iser::testing::run_as_ranks;
using testing::rank_barrier;

// The two-rank case every test here runs: EP2, E = 16, S = 2 (g_min 2), 2048 x 1024 experts,
// top-4, 256 tokens per rank; this rank's slice of one global token stream (tokens
// [rank*tau, (rank+1)*tau)) and its input activations, on the device.
struct TwoRankCase {
  LayerConfig config;
  int tau = 0;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  size_t elems = 0;  // tau * He
  DeviceBuffer input;

  explicit TwoRankCase(int rank) {
    config.topo = Topology::make(2, 16, 2, /*g_min=*/2);
    config.shape = {2048, 1024};
    config.top_k = 4;
    config.tokens_per_rank = 256;
    tau = config.tokens_per_rank;
    const int top_k = config.top_k;
    std::vector<int32_t> all_ids;
    std::vector<float> all_weights;
    testing::make_routes(2 * tau, top_k, config.topo.num_experts, all_ids, all_weights);
    const ptrdiff_t first = ptrdiff_t{rank} * tau * top_k;
    const ptrdiff_t last = first + ptrdiff_t{tau} * top_k;
    ids.assign(all_ids.begin() + first, all_ids.begin() + last);
    weights.assign(all_weights.begin() + first, all_weights.begin() + last);
    elems = static_cast<size_t>(tau) * config.shape.hidden;
    input = DeviceBuffer(elems * 2);
    cuda::launch_fill_uniform({input.get<uint16_t>(), static_cast<int64_t>(elems),
                               99 + static_cast<uint64_t>(rank), 1.0f},
                              nullptr);
    ISER_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

TEST(MoeEpLayer, TwoRanksOnAndOffBitwiseIdentical) {
  ISER_AS_RANKS(2, 300);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  TwoRankCase setup(env->rank);
  auto& [config, tau, ids, weights, elems, input] = setup;
  Runtime runtime(ep_runtime_config(config), comm);
  EpMoeLayer layer(config, runtime, comm.get());
  layer.fill_weights(21, 1.0f / 45.0f);
  DeviceBuffer out_off(elems * 2), out_on(elems * 2), out_again(elems * 2);

  layer.forward(input.get(), ids, weights, false, out_off.get());
  const EpLayerTimings off = layer.finish();
  const LayerInvocationStats on = layer.forward(input.get(), ids, weights, true, out_on.get());
  const EpLayerTimings on_times = layer.finish();
  layer.forward(input.get(), ids, weights, true, out_again.get());  // generation 2, same bank
  layer.finish();

  ASSERT_FALSE(on.plan.broadcasts.empty()) << "the routing must be skewed enough to replicate";
  EXPECT_EQ(off.copy_ms, 0.0f);
  EXPECT_GT(on_times.copy_ms, 0.0f);
  const auto a = testing::download(out_off.get(), elems);
  const auto b = testing::download(out_on.get(), elems);
  const auto c = testing::download(out_again.get(), elems);
  const int he = config.shape.hidden;
  EXPECT_EQ(-1, testing::first_differing_token(a, b, tau, he))
      << "rank " << env->rank << ": this token differs between OFF and ON";
  EXPECT_EQ(-1, testing::first_differing_token(b, c, tau, he))
      << "rank " << env->rank << ": this token differs between two ON invocations";
}

// The GPU-planned mode: the plan the device made (decoded on the host) is the host planner's plan
// on the same counts, bit for bit, and the output is the host-planned ON output and OFF's, bit
// for bit, over two generations of the helper bank. One runtime per layer (each layer numbers
// its generations from 1), destroyed only after both ranks are done with its memory.
TEST(MoeEpLayer, GpuPlannerMatchesHostPlannerBitwise) {
  ISER_AS_RANKS(2, 300);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  TwoRankCase setup(env->rank);
  auto& [config, tau, ids, weights, elems, input] = setup;
  DeviceBuffer out(elems * 2), barrier(sizeof(float));
  // One invocation: returns its stats and timings, the output in `result`.
  const auto invoke = [&](EpMoeLayer& layer, bool balance, std::vector<uint16_t>& result,
                          EpLayerTimings* timings = nullptr) {
    // NOTE: setup's members, not the structured bindings: a lambda may not name those (C++17).
    LayerInvocationStats stats =
        layer.forward(setup.input.get(), setup.ids, setup.weights, balance, out.get());
    const EpLayerTimings t = layer.finish();
    if (timings != nullptr) *timings = t;
    result = testing::download(out.get(), setup.elems);
    return stats;
  };

  std::vector<uint16_t> off, host_on, gpu_on, gpu_again, gpu_off;
  LayerInvocationStats host_stats, gpu_stats, gpu_stats_again;
  EpLayerTimings gpu_times, gpu_times_again;
  for (const PlannerKind planner : {PlannerKind::kHost, PlannerKind::kGpu}) {
    auto runtime = std::make_unique<Runtime>(ep_runtime_config(config), comm);
    EpLayerOptions options;
    options.planner = planner;
    auto layer = std::make_unique<EpMoeLayer>(config, *runtime, comm.get(), options);
    layer->fill_weights(21, 1.0f / 45.0f);
    if (planner == PlannerKind::kHost) {
      invoke(*layer, false, off);
      host_stats = invoke(*layer, true, host_on);
    } else {
      gpu_stats = invoke(*layer, true, gpu_on, &gpu_times);
      gpu_stats_again = invoke(*layer, true, gpu_again, &gpu_times_again);  // generation 2
      invoke(*layer, false, gpu_off);
    }
    rank_barrier(comm.get(), barrier);  // the peer no longer reads this runtime's memory
    layer.reset();
    runtime.reset();
    rank_barrier(comm.get(), barrier);
  }

  ASSERT_FALSE(host_stats.plan.broadcasts.empty()) << "the routing must be skewed enough";
  EXPECT_FALSE(gpu_times.plan_rejected);
  EXPECT_FALSE(gpu_times_again.plan_rejected);
  EXPECT_TRUE(gpu_stats.plan == host_stats.plan) << "GPU plan != host plan";
  EXPECT_TRUE(gpu_stats_again.plan == host_stats.plan) << "GPU plan != host plan (generation 2)";
  EXPECT_EQ(gpu_stats.remote_copies, host_stats.remote_copies);
  EXPECT_EQ(gpu_stats.helper_routes, host_stats.helper_routes);
  EXPECT_GT(gpu_times.gpu_plan_ms, 0.0f);
  EXPECT_GT(gpu_times.copy_ms, 0.0f);
  EXPECT_EQ(gpu_times.fallback_slots, 0u);
  const auto same = [&](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                        const char* what) {
    EXPECT_EQ(-1, testing::first_differing_token(a, b, setup.tau, setup.config.shape.hidden))
        << "rank " << env->rank << ": " << what << " at this token";
  };
  same(off, host_on, "OFF != host-planned ON");
  same(host_on, gpu_on, "host-planned ON != GPU-planned ON");
  same(gpu_on, gpu_again, "GPU-planned ON differs between generations");
  same(off, gpu_off, "OFF differs between the layers");
}

// Rank 0's COPY stream stalls before replicating, longer than the READY timeout: every gate gives
// up on rank 0's replicas, the layer refills those helper slots from the home bundles, and the
// output is still OFF's, bit for bit; the next ON invocation (no stall) is normal again.
// With the GPU planner the stall sits after the plan on COPY (MAIN waits only for the plan).
void stalled_copy_falls_back(const RankEnv& rank_env, PlannerKind planner) {
  const RankEnv* env = &rank_env;
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  TwoRankCase setup(env->rank);
  auto& [config, tau, ids, weights, elems, input] = setup;
  RuntimeConfig runtime_config = ep_runtime_config(config);
  runtime_config.timeout_us = 200'000;  // the gate gives up long before the stall ends
  Runtime runtime(runtime_config, comm);
  EpLayerOptions options;
  options.planner = planner;
  EpMoeLayer layer(config, runtime, comm.get(), options);
  layer.fill_weights(21, 1.0f / 45.0f);
  DeviceBuffer out_off(elems * 2), out_on(elems * 2), out_again(elems * 2);
  DeviceBuffer flag(sizeof(int)), barrier(sizeof(float));
  ISER_CUDA_CHECK(cudaMemset(flag.get(), 0, sizeof(int)));  // never released: times out

  layer.forward(input.get(), ids, weights, false, out_off.get());
  layer.finish();
  // Both ranks past the previous invocation (its stalled copy included) before the next count
  // exchange, whose wait has the same short timeout.
  rank_barrier(comm.get(), barrier);
  if (env->rank == 0) {
    ::iser::testing::set_copy_hook(layer, [&](Stream stream) {
      ISER_CUDA_CHECK(::iser::testing::launch_stall(flag.get<int>(), 1'500'000'000ull, stream));
    });
  }
  const LayerInvocationStats on = layer.forward(input.get(), ids, weights, true, out_on.get());
  const EpLayerTimings stalled = layer.finish();
  ::iser::testing::set_copy_hook(layer, {});
  rank_barrier(comm.get(), barrier);
  layer.forward(input.get(), ids, weights, true, out_again.get());
  const EpLayerTimings again = layer.finish();

  ASSERT_FALSE(on.plan.broadcasts.empty()) << "the routing must be skewed enough to replicate";
  // Every op rank 0 writes (owner-direct) into a group holding this rank had no valid replica;
  // rank 1's ops did (its copy was not stalled).
  uint32_t expect_refilled = 0;
  bool rank0_writes = false;
  for (const CopyOp& op : make_copy_list(on.plan)) {
    const bool member = env->rank >= op.group_begin && env->rank < op.group_begin + op.group_size;
    rank0_writes = rank0_writes || op.owner == 0;
    if (member && op.owner == 0) ++expect_refilled;
  }
  ASSERT_TRUE(rank0_writes) << "the plan must have rank 0 write a replica";
  EXPECT_EQ(stalled.fallback_slots, expect_refilled);
  EXPECT_GT(stalled.ready_wait_ms, 150.0f) << "the gate should have waited for its timeout";
  EXPECT_EQ(again.fallback_slots, 0u);
  const auto a = testing::download(out_off.get(), elems);
  const auto b = testing::download(out_on.get(), elems);
  const auto c = testing::download(out_again.get(), elems);
  const int he = config.shape.hidden;
  EXPECT_EQ(-1, testing::first_differing_token(a, b, tau, he))
      << "rank " << env->rank << ": this token differs between OFF and the stalled ON";
  EXPECT_EQ(-1, testing::first_differing_token(a, c, tau, he))
      << "rank " << env->rank << ": this token differs between OFF and the next ON";
  EXPECT_FALSE(stalled.plan_rejected);
  EXPECT_FALSE(again.plan_rejected);
}

// A GPU plan that fails its checks (here: a status word set after the planner ran, as a device
// fault would) is refused on every rank alike: the invocation runs unbalanced, its output is
// OFF's, it is reported in the timings, and the next invocation plans normally again.
TEST(MoeEpLayer, RejectedGpuPlanRunsUnbalanced) {
  ISER_AS_RANKS(2, 300);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  TwoRankCase setup(env->rank);
  auto& [config, tau, ids, weights, elems, input] = setup;
  Runtime runtime(ep_runtime_config(config), comm);
  EpLayerOptions options;
  options.planner = PlannerKind::kGpu;
  EpMoeLayer layer(config, runtime, comm.get(), options);
  layer.fill_weights(21, 1.0f / 45.0f);
  DeviceBuffer out_off(elems * 2), out_rejected(elems * 2), out_on(elems * 2);
  DeviceBuffer bad_status(sizeof(int32_t));
  const int32_t invariant = static_cast<int32_t>(kGpuPlanInvariant);
  ISER_CUDA_CHECK(
      cudaMemcpy(bad_status.get(), &invariant, sizeof(int32_t), cudaMemcpyHostToDevice));
  ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // landed before the layer's streams read it

  layer.forward(input.get(), ids, weights, false, out_off.get());
  layer.finish();
  ::iser::testing::set_plan_hook(layer, [&](Stream stream, int32_t* plan_words) {
    ISER_CUDA_CHECK(cudaMemcpyAsync(plan_words + GpuPlanLayout::kStatus, bad_status.get(),
                                    sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
  });
  const LayerInvocationStats rejected =
      layer.forward(input.get(), ids, weights, true, out_rejected.get());
  const EpLayerTimings rejected_times = layer.finish();
  ::iser::testing::set_plan_hook(layer, {});
  const LayerInvocationStats on = layer.forward(input.get(), ids, weights, true, out_on.get());
  const EpLayerTimings on_times = layer.finish();

  EXPECT_TRUE(rejected_times.plan_rejected);
  EXPECT_TRUE(rejected.plan.broadcasts.empty());
  EXPECT_EQ(rejected.helper_routes, 0);
  EXPECT_FALSE(on_times.plan_rejected);
  ASSERT_FALSE(on.plan.broadcasts.empty()) << "the routing must be skewed enough to replicate";
  const auto off = testing::download(out_off.get(), elems);
  const auto bad = testing::download(out_rejected.get(), elems);
  const auto good = testing::download(out_on.get(), elems);
  ASSERT_EQ(0, std::memcmp(off.data(), bad.data(), elems * 2))
      << "rank " << env->rank << ": the rejected invocation's output differs from OFF";
  ASSERT_EQ(0, std::memcmp(off.data(), good.data(), elems * 2))
      << "rank " << env->rank << ": the next ON output differs from OFF";
}

// A forward() that throws (here: a copy hook that throws, on both ranks, right before the
// replication) leaves no generation half-used: finish() refuses the failed invocation, and the
// next ON invocation's reuse fence finds the bank released (a short timeout would otherwise turn
// into a fence failure, which finish() throws) and gives OFF's output, bit for bit.
void throwing_forward_leaves_the_layer_usable(const RankEnv& rank_env, PlannerKind planner) {
  const RankEnv* env = &rank_env;
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  TwoRankCase setup(env->rank);
  RuntimeConfig runtime_config = ep_runtime_config(setup.config);
  runtime_config.timeout_us = 200'000;
  Runtime runtime(runtime_config, comm);
  EpLayerOptions options;
  options.planner = planner;
  EpMoeLayer layer(setup.config, runtime, comm.get(), options);
  layer.fill_weights(21, 1.0f / 45.0f);
  DeviceBuffer out_off(setup.elems * 2), out_on(setup.elems * 2), barrier(sizeof(float));

  layer.forward(setup.input.get(), setup.ids, setup.weights, false, out_off.get());
  layer.finish();
  ::iser::testing::set_copy_hook(
      layer, [](Stream) { throw Error("injected failure before the replication"); });
  EXPECT_THROW(layer.forward(setup.input.get(), setup.ids, setup.weights, true, out_on.get()),
               Error);
  EXPECT_THROW(layer.finish(), Error);
  ::iser::testing::set_copy_hook(layer, {});
  rank_barrier(comm.get(), barrier);
  const LayerInvocationStats on =
      layer.forward(setup.input.get(), setup.ids, setup.weights, true, out_on.get());
  const EpLayerTimings times = layer.finish();

  ASSERT_FALSE(on.plan.broadcasts.empty()) << "the routing must be skewed enough to replicate";
  EXPECT_EQ(times.fallback_slots, 0u);
  EXPECT_FALSE(times.plan_rejected);
  const auto off = testing::download(out_off.get(), setup.elems);
  const auto good = testing::download(out_on.get(), setup.elems);
  ASSERT_EQ(0, std::memcmp(off.data(), good.data(), setup.elems * 2))
      << "rank " << env->rank << ": the ON output after a failed forward differs from OFF";
}

TEST(MoeEpLayer, ThrowingForwardLeavesTheLayerUsable) {
  ISER_AS_RANKS(2, 300);
  throwing_forward_leaves_the_layer_usable(*env, PlannerKind::kHost);
}

TEST(MoeEpLayer, ThrowingForwardLeavesTheLayerUsableGpuPlanner) {
  ISER_AS_RANKS(2, 300);
  throwing_forward_leaves_the_layer_usable(*env, PlannerKind::kGpu);
}

TEST(MoeEpLayer, StalledCopyFallsBackToHomeBundles) {
  ISER_AS_RANKS(2, 300);
  stalled_copy_falls_back(*env, PlannerKind::kHost);
}

TEST(MoeEpLayer, StalledCopyFallsBackToHomeBundlesGpuPlanner) {
  ISER_AS_RANKS(2, 300);
  stalled_copy_falls_back(*env, PlannerKind::kGpu);
}

}  // namespace
}  // namespace iser::moe
