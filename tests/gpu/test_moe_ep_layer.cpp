// Reference EP MoE layer with one process per GPU (include/iser/moe_ep_layer.h): on 2 GPUs, ON
// (replicas over NVLink behind the READY gate) and OFF give bitwise-identical outputs, and stay
// identical across generations of the helper bank.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/moe_kernels.h"
#include "iser/moe_ep_layer.h"
#include "moe/device_buffer.h"
#include "moe_test_util.h"
#include "multiprocess_util.h"

namespace iser::moe {
namespace {

using ::iser::testing::child_env;
using ::iser::testing::RankEnv;
using ::iser::testing::run_as_ranks;

TEST(MoeEpLayer, TwoRanksOnAndOffBitwiseIdentical) {
  ISER_AS_RANKS(2, 300);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  LayerConfig config;
  config.topo = Topology::make(2, 16, 2, /*g_min=*/2);
  config.shape = {2048, 1024};
  config.top_k = 4;
  config.tokens_per_rank = 256;
  const int tau = config.tokens_per_rank;
  const int top_k = config.top_k;
  Runtime runtime(ep_runtime_config(config), comm);
  EpMoeLayer layer(config, runtime, comm.get());
  layer.fill_weights(21, 1.0f / 45.0f);

  // The global token stream; this rank holds tokens [rank*tau, (rank+1)*tau).
  std::vector<int32_t> all_ids;
  std::vector<float> all_weights;
  testing::make_routes(2 * tau, top_k, config.topo.num_experts, all_ids, all_weights);
  const std::vector<int32_t> ids(all_ids.begin() + env->rank * tau * top_k,
                                 all_ids.begin() + (env->rank + 1) * tau * top_k);
  const std::vector<float> weights(all_weights.begin() + env->rank * tau * top_k,
                                   all_weights.begin() + (env->rank + 1) * tau * top_k);
  const size_t elems = static_cast<size_t>(tau) * config.shape.hidden;
  DeviceBuffer input(elems * 2), out_off(elems * 2), out_on(elems * 2), out_again(elems * 2);
  cuda::launch_fill_uniform({input.get<uint16_t>(), static_cast<int64_t>(elems),
                             99 + static_cast<uint64_t>(env->rank), 1.0f},
                            nullptr);
  ISER_CUDA_CHECK(cudaDeviceSynchronize());

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
  for (int t = 0; t < tau; ++t) {
    const size_t he = config.shape.hidden;
    ASSERT_EQ(0, std::memcmp(a.data() + t * he, b.data() + t * he, he * 2))
        << "rank " << env->rank << " token " << t << " differs between OFF and ON";
    ASSERT_EQ(0, std::memcmp(b.data() + t * he, c.data() + t * he, he * 2))
        << "rank " << env->rank << " token " << t << " differs between two ON invocations";
  }
}

}  // namespace
}  // namespace iser::moe
