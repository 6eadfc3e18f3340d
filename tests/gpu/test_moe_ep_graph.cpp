// Static-shape graph mode of the EP MoE layer (include/iser/moe_ep_graph.h), on 2 GPUs: one
// invocation captured once and replayed for 24 routings (skew, hot experts and inputs change
// between replays, written into the layer's static buffers) gives the eager EpMoeLayer's OFF output
// bit for bit every time, ON and OFF, with every slot at M = C and with size-aware GEMMs (switch
// nodes); a stalled copy captured into the graph makes the peer's READY gate time out, the helper
// slots are refilled from home bundles and the output is still OFF's; bad inputs are reported by
// the rank that sees them and the next replay is exact. The set-up refusals are host-only.
// The tests that need two GPUs skip themselves on one (runs: docs/moe.md).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nccl.h>

#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/moe_ep_graph.h"
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

constexpr int kReplays = 24;

// EP2, E = 16, S = 2 (g_min 2), 2048 x 1024 experts, top-4, 64 tokens per rank: C = 128.
LayerConfig graph_case_config() {
  LayerConfig config;
  config.topo = Topology::make(2, 16, 2, /*g_min=*/2);
  config.shape = {2048, 1024};
  config.top_k = 4;
  config.tokens_per_rank = 64;
  return config;
}

// Routing of invocation `invocation` for the whole token stream (both ranks), skewed towards a
// hot set that moves with the invocation (e = shift + E u^p, p in 1..4): plans, copies and slot
// sizes change between replays. Distinct experts per token; a few choices are -1.
void invocation_routes(int invocation, int num_tokens, int top_k, int num_experts,
                       std::vector<int32_t>& ids, std::vector<float>& weights) {
  uint64_t state = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(invocation + 1);
  const auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  const int power = 1 + invocation % 4;
  const int shift = (invocation * 5) % num_experts;
  ids.assign(static_cast<size_t>(num_tokens) * top_k, -1);
  weights.assign(ids.size(), 0.0f);
  for (int t = 0; t < num_tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      int e = 0;
      bool repeat = true;
      while (repeat) {
        double u = next();
        for (int p = 1; p < power; ++p) u *= u;
        e = (shift + static_cast<int>(num_experts * u)) % num_experts;
        repeat = false;
        for (int i = 0; i < j; ++i) repeat = repeat || ids[t * top_k + i] == e;
      }
      ids[t * top_k + j] = ((t + invocation) % 53 == 7 && j == top_k - 1) ? -1 : e;
      weights[t * top_k + j] = static_cast<float>(0.05 + 0.95 * next());
    }
  }
}

// This rank's slice of invocation `invocation`: ids, weights and its input rows (in `input`).
struct RankSlice {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
RankSlice rank_slice(const LayerConfig& config, int rank, int invocation, DeviceBuffer& input) {
  const int tau = config.tokens_per_rank;
  const int top_k = config.top_k;
  std::vector<int32_t> all_ids;
  std::vector<float> all_weights;
  invocation_routes(invocation, config.topo.num_ranks * tau, top_k, config.topo.num_experts,
                    all_ids, all_weights);
  const ptrdiff_t first = ptrdiff_t{rank} * tau * top_k;
  const ptrdiff_t last = first + ptrdiff_t{tau} * top_k;
  RankSlice slice;
  slice.ids.assign(all_ids.begin() + first, all_ids.begin() + last);
  slice.weights.assign(all_weights.begin() + first, all_weights.begin() + last);
  const int64_t elems = int64_t{tau} * config.shape.hidden;
  cuda::launch_fill_uniform(
      {input.get<uint16_t>(), elems, 1000 + 17 * static_cast<uint64_t>(invocation) + rank, 1.0f},
      nullptr);
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
  return slice;
}

// Writes a slice into a graph layer's static buffers (stream-ordered before its launch).
void load_graph_inputs(GraphEpMoeLayer& layer, const RankSlice& slice, const DeviceBuffer& input) {
  const cudaStream_t stream = layer.stream();
  ISER_CUDA_CHECK(cudaMemcpyAsync(layer.topk_ids(), slice.ids.data(), slice.ids.size() * 4,
                                  cudaMemcpyHostToDevice, stream));
  ISER_CUDA_CHECK(cudaMemcpyAsync(layer.topk_weights(), slice.weights.data(),
                                  slice.weights.size() * 4, cudaMemcpyHostToDevice, stream));
  ISER_CUDA_CHECK(
      cudaMemcpyAsync(layer.input(), input.get(), input.bytes(), cudaMemcpyDeviceToDevice, stream));
}

// The reference (the eager layer with the host planner) beside graph ON and OFF layers of the
// same config and weights; one runtime per layer, since each numbers its own generations.
struct EagerAndGraphs {
  EagerAndGraphs(const LayerConfig& config, Communicator& comm, bool size_aware)
      : eager_runtime(ep_runtime_config(config), comm),
        on_runtime(ep_runtime_config(config), comm),
        off_runtime(ep_runtime_config(config), comm),
        eager(config, eager_runtime, comm.get(), EpLayerOptions{.planner = PlannerKind::kHost}),
        graph_on(config, on_runtime, comm.get(),
                 GraphLayerOptions{.balance = true, .size_aware = size_aware}),
        graph_off(config, off_runtime, comm.get(),
                  GraphLayerOptions{.balance = false, .size_aware = size_aware}) {
    eager.fill_weights(21, 1.0f / 45.0f);
    graph_on.fill_weights(21, 1.0f / 45.0f);
    graph_off.fill_weights(21, 1.0f / 45.0f);
  }

  Runtime eager_runtime, on_runtime, off_runtime;
  EpMoeLayer eager;
  GraphEpMoeLayer graph_on, graph_off;
};

// size_aware: the slots' GEMMs through switch nodes (GraphLayerOptions::size_aware).
void replays_match_eager_off(const RankEnv& rank_env, bool size_aware) {
  const RankEnv* env = &rank_env;
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  const LayerConfig config = graph_case_config();
  const size_t elems = static_cast<size_t>(config.tokens_per_rank) * config.shape.hidden;
  EagerAndGraphs layers(config, comm, size_aware);
  EpMoeLayer& eager = layers.eager;
  GraphEpMoeLayer& graph_on = layers.graph_on;
  GraphEpMoeLayer& graph_off = layers.graph_off;
  EXPECT_EQ(graph_on.dims().slot_rows, 128);
  EXPECT_EQ(graph_on.dims().peer_rows, 256);
  graph_on.capture();
  graph_off.capture();

  DeviceBuffer input(elems * 2), eager_out(elems * 2);
  int balanced_invocations = 0;
  for (int invocation = 0; invocation < kReplays; ++invocation) {
    const RankSlice slice = rank_slice(config, env->rank, invocation, input);
    eager.forward(input.get(), slice.ids, slice.weights, false, eager_out.get());
    eager.finish();
    const auto want = testing::download(eager_out.get(), elems);
    // The eager ON plan is the graph's (the GPU planner reproduces the host planner, bit for bit).
    const LayerInvocationStats on =
        eager.forward(input.get(), slice.ids, slice.weights, true, eager_out.get());
    eager.finish();
    if (!on.plan.broadcasts.empty()) ++balanced_invocations;

    for (GraphEpMoeLayer* layer : {&graph_on, &graph_off}) {
      ISER_CUDA_CHECK(cudaMemsetAsync(layer->output(), 0xff, elems * 2, layer->stream()));
      load_graph_inputs(*layer, slice, input);
      layer->launch();
      const GraphLayerResult result = layer->finish();
      EXPECT_EQ(result.fallback_slots, 0u);
      EXPECT_FALSE(result.plan_rejected);
      const auto got = testing::download(layer->output(), elems);
      ASSERT_EQ(-1, testing::first_differing_token(want, got, config.tokens_per_rank,
                                                   config.shape.hidden))
          << "rank " << env->rank << " invocation " << invocation << ": graph "
          << (layer == &graph_on ? "ON" : "OFF") << " != eager OFF at this token";
    }
  }
  // Every routing here replicates (checked against the host planner when the test was written);
  // the helper slots are exercised in every replay.
  EXPECT_EQ(balanced_invocations, kReplays);
  DeviceBuffer barrier(sizeof(float));
  rank_barrier(comm.get(), barrier);
}

TEST(MoeEpGraph, ReplaysMatchEagerOffBitwise) {
  ISER_AS_RANKS(2, 400);
  replays_match_eager_off(*env, false);
}

// The same with size-aware GEMMs: every slot at the smallest row bucket holding its rows (empty
// slots skipped), chosen on the device at every replay. Not yet run on a GPU.
TEST(MoeEpGraph, SizeAwareReplaysMatchEagerOffBitwise) {
  ISER_AS_RANKS(2, 400);
  replays_match_eager_off(*env, true);
}

// Rank 0's COPY stream stalls before the replication in one replay (the stall kernel is part of
// the graph; a flag decides whether it waits): rank 1's READY gate times out on rank 0's replicas,
// rank 1 refills those helper slots from the home bundles, and every output is eager OFF's.
TEST(MoeEpGraph, StalledCopyFallsBackToHomeBundles) {
  ISER_AS_RANKS(2, 400);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  const LayerConfig config = graph_case_config();
  const size_t elems = static_cast<size_t>(config.tokens_per_rank) * config.shape.hidden;
  Runtime eager_runtime(ep_runtime_config(config), comm);
  RuntimeConfig graph_runtime_config = ep_runtime_config(config);
  graph_runtime_config.timeout_us = 200'000;  // the gate gives up long before the stall ends
  Runtime graph_runtime(graph_runtime_config, comm);
  EpLayerOptions host_planner;
  host_planner.planner = PlannerKind::kHost;
  EpMoeLayer eager(config, eager_runtime, comm.get(), host_planner);
  GraphEpMoeLayer graph(config, graph_runtime, comm.get());
  eager.fill_weights(21, 1.0f / 45.0f);
  graph.fill_weights(21, 1.0f / 45.0f);
  DeviceBuffer flag(sizeof(int)), barrier(sizeof(float));
  const int released = 1, held = 0;
  ISER_CUDA_CHECK(cudaMemcpy(flag.get(), &released, sizeof(int), cudaMemcpyHostToDevice));
  ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // landed before the layer's streams read it
  if (env->rank == 0) {
    ::iser::testing::set_copy_hook(graph, [&](Stream stream) {
      ISER_CUDA_CHECK(::iser::testing::launch_stall(flag.get<int>(), 1'500'000'000ull, stream));
    });
  }
  graph.capture();
  ::iser::testing::set_copy_hook(graph, {});

  DeviceBuffer input(elems * 2), eager_out(elems * 2);
  // Invocation 1's routing is skewed towards rank 0's home experts (e = 5 + 16 u^2): rank 0
  // writes the replica (checked below).
  for (int replay = 0; replay < 3; ++replay) {
    const bool stall = replay == 1;
    const RankSlice slice = rank_slice(config, env->rank, 1, input);
    eager.forward(input.get(), slice.ids, slice.weights, false, eager_out.get());
    eager.finish();
    const auto want = testing::download(eager_out.get(), elems);
    const LayerInvocationStats on =
        eager.forward(input.get(), slice.ids, slice.weights, true, eager_out.get());
    eager.finish();
    ASSERT_FALSE(on.plan.broadcasts.empty()) << "the routing must be skewed enough to replicate";

    rank_barrier(comm.get(), barrier);  // the previous replay is over on both ranks
    ISER_CUDA_CHECK(
        cudaMemcpy(flag.get(), stall ? &held : &released, sizeof(int), cudaMemcpyHostToDevice));
    ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // a pageable copy may return before its DMA
    load_graph_inputs(graph, slice, input);
    graph.launch();
    const GraphLayerResult result = graph.finish();
    rank_barrier(comm.get(), barrier);  // both ranks past this replay, the stall included
    // Helper slots of this rank that a stalled writer (rank 0: owner-direct ops it owns, SAMI ops
    // it is a member of) should have filled; rank 0's own gate runs after its late copy.
    uint32_t expect_refilled = 0;
    bool rank0_writes = false;
    for (const CopyOp& op : make_copy_list(on.plan)) {
      const bool member = env->rank >= op.group_begin && env->rank < op.group_begin + op.group_size;
      const bool rank0_writer = op.mode == TransportMode::kSami
                                    ? op.group_begin == 0 && op.group_size > 0
                                    : op.owner == 0;
      rank0_writes = rank0_writes || rank0_writer;
      if (stall && env->rank != 0 && member && rank0_writer) ++expect_refilled;
    }
    ASSERT_TRUE(rank0_writes) << "the plan must have rank 0 write a replica";
    EXPECT_EQ(result.fallback_slots, expect_refilled)
        << "rank " << env->rank << " replay " << replay;
    EXPECT_FALSE(result.plan_rejected);
    const auto got = testing::download(graph.output(), elems);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), elems * 2))
        << "rank " << env->rank << " replay " << replay << (stall ? " (stalled)" : "")
        << ": graph ON != eager OFF";
  }
  rank_barrier(comm.get(), barrier);
}

// finish() of a launch whose inputs break the contract throws naming the error, on the rank that
// sees it (the graph still runs to the end on every rank: its exchanges have fixed sizes), and the
// next replay with valid inputs is exact again.
void expect_finish_error(GraphEpMoeLayer& layer, bool expect_error, const std::string& needle) {
  try {
    layer.finish();
    EXPECT_FALSE(expect_error) << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_TRUE(expect_error) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MoeEpGraph, BadInputsAreReportedAndTheNextReplayIsExact) {
  ISER_AS_RANKS(2, 300);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  const LayerConfig config = graph_case_config();
  const size_t elems = static_cast<size_t>(config.tokens_per_rank) * config.shape.hidden;
  EagerAndGraphs layers(config, comm, GraphLayerOptions{}.size_aware);
  EpMoeLayer& eager = layers.eager;
  GraphEpMoeLayer& graph_on = layers.graph_on;
  GraphEpMoeLayer& graph_off = layers.graph_off;
  graph_on.capture();
  graph_off.capture();
  DeviceBuffer input(elems * 2), eager_out(elems * 2), barrier(sizeof(float));
  const RankSlice good = rank_slice(config, env->rank, 2, input);

  // An expert id E on rank 0: dropped, and rank 0's finish() names it (ON and OFF).
  RankSlice bad_id = good;
  if (env->rank == 0) bad_id.ids[5] = config.topo.num_experts;
  for (GraphEpMoeLayer* layer : {&graph_on, &graph_off}) {
    load_graph_inputs(*layer, bad_id, input);
    layer->launch();
    expect_finish_error(*layer, env->rank == 0, "expert id outside [-1, E)");
    rank_barrier(comm.get(), barrier);
  }
  // Every choice of every token is expert 0 (a token's experts repeat): OFF sends all 2 tau k =
  // 512 routes to rank 0's home slot 0, which holds C = 128 rows: rank 0 drops the rest and says
  // so.
  RankSlice repeated = good;
  std::fill(repeated.ids.begin(), repeated.ids.end(), 0);
  load_graph_inputs(graph_off, repeated, input);
  graph_off.launch();
  expect_finish_error(graph_off, env->rank == 0, "more than C rows");
  rank_barrier(comm.get(), barrier);

  eager.forward(input.get(), good.ids, good.weights, false, eager_out.get());
  eager.finish();
  const auto want = testing::download(eager_out.get(), elems);
  for (GraphEpMoeLayer* layer : {&graph_on, &graph_off}) {
    load_graph_inputs(*layer, good, input);
    layer->launch();
    const GraphLayerResult result = layer->finish();
    EXPECT_EQ(result.fallback_slots, 0u);
    EXPECT_FALSE(result.plan_rejected);
    const auto got = testing::download(layer->output(), elems);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), elems * 2))
        << "rank " << env->rank << ": the replay after bad inputs differs from eager OFF";
  }
  rank_barrier(comm.get(), barrier);
}

// Set-up refusals, host only: each names the field and its value.
void expect_refused(const LayerConfig& config, bool balance, const std::string& needle) {
  try {
    graph_dims(config, balance);
    ADD_FAILURE() << "not refused; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MoeEpGraphSetUp, DimsAndRefusals) {
  LayerConfig config;
  config.topo = Topology::make(2, 384, 4, 2);
  config.shape = {7168, 3072};
  config.top_k = 6;
  config.tokens_per_rank = 64;
  const GraphDims dims = graph_dims(config, true);
  EXPECT_EQ(dims.slots_per_rank, 196);
  EXPECT_EQ(dims.peer_rows, 384);
  EXPECT_EQ(dims.header_rows, 1);  // 196 int32 fit in one 14,336-byte row
  EXPECT_EQ(dims.block_rows(), 385);
  EXPECT_EQ(dims.slot_rows, 128);
  EXPECT_EQ(dims.send_row(1, 5), 385 + 1 + 5);
  EXPECT_EQ(dims.expert_rows(), 196 * 128);
  config.tokens_per_rank = 128;
  EXPECT_EQ(graph_dims(config, true).slot_rows, kGraphMaxSlotRows);

  config.tokens_per_rank = 129;  // C = 258
  expect_refused(config, true, "tokens_per_rank = 129");
  expect_refused(config, false, "kGraphMaxSlotRows = 256");
  config.tokens_per_rank = 0;
  expect_refused(config, true, "tokens_per_rank = 0");
  config.tokens_per_rank = 64;
  for (const char* policy : {"iser", "resident", "eplb"}) {
    config.policy = policy;
    expect_refused(config, true, std::string("policy '") + policy + "'");
    EXPECT_EQ(graph_dims(config, false).slot_rows, 128) << "OFF needs no planner: " << policy;
  }
  config.policy = "halo-q";
  config.topo = Topology::make(2, 384, 33, 2);
  expect_refused(config, false, "num_slots = 33");
  config.topo = Topology::make(2, 384, 4, 2);
  config.top_k = 0;
  expect_refused(config, true, "top_k = 0");
  // A header wider than a row takes several rows.
  config.top_k = 6;
  config.shape = {8, 8};
  EXPECT_EQ(graph_dims(config, false).header_rows, (4 * 196 + 15) / 16);
}

}  // namespace
}  // namespace iser::moe
