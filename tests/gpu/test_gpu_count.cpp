// Count kernel == CPU: count rows and per-tile histograms (the rewrite kernels' route ordinals)
// over row lengths around the tile and cluster boundaries, E not a multiple of 4, -1 ids, ids out
// of range (kGpuBadExpertId), tau = 0 / 1, several rows, skewed and uniform ids, graph replays.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <string>
#include <vector>

#include "cuda/planner_kernels.h"
#include "gpu/planner_batches.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"

namespace iser {
namespace {

using namespace planner_test;

struct CountCase {
  int rows = 1;
  int routes = 0;
  int experts = 384;
  double bad_share = 0.0;  // ids out of range
  double none_share = 0.0;  // -1 ids
  bool skewed = false;      // most ids on expert 0
};

std::string describe(const CountCase& c) {
  return "rows " + std::to_string(c.rows) + ", routes " + std::to_string(c.routes) + ", E " +
         std::to_string(c.experts) + ", bad " + std::to_string(c.bad_share) + ", none " +
         std::to_string(c.none_share) + (c.skewed ? ", skewed" : "");
}

std::vector<int32_t> make_ids(const CountCase& c, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(c.rows) * c.routes);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int32_t> expert(0, c.experts - 1);
  const int32_t bad[] = {c.experts, c.experts + 7, -2, INT_MIN, INT_MAX};
  for (auto& id : ids) {
    const double x = u(rng);
    if (x < c.bad_share) {
      id = bad[rng() % 5];
    } else if (x < c.bad_share + c.none_share) {
      id = -1;
    } else {
      id = c.skewed && u(rng) < 0.7 ? 0 : expert(rng);
    }
  }
  return ids;
}

// Launches the count kernel on `ids` and checks counts, tile counts and the error bit.
void expect_counts_match(const CountCase& c, const std::vector<int32_t>& ids, int replays = 1) {
  const int E = c.experts;
  const int tiles = cuda::num_route_tiles(c.routes);
  std::vector<int32_t> want(static_cast<size_t>(c.rows) * E, 0);
  std::vector<int32_t> want_tiles(static_cast<size_t>(c.rows) * tiles * E, 0);
  bool any_bad = false;
  for (int r = 0; r < c.rows; ++r) {
    for (int i = 0; i < c.routes; ++i) {
      const int32_t id = ids[static_cast<size_t>(r) * c.routes + i];
      if (id >= 0 && id < E) {
        ++want[static_cast<size_t>(r) * E + id];
        ++want_tiles[(static_cast<size_t>(r) * tiles + i / cuda::kRouteTile) * E + id];
      } else if (id != -1) {
        any_bad = true;
      }
    }
  }
  DeviceBuffer<int32_t> d_ids(ids.size());
  DeviceBuffer<int32_t> d_counts(want.size());
  DeviceBuffer<int32_t> d_tiles(want_tiles.size());
  DeviceBuffer<uint32_t> d_error(1);
  d_ids.upload(ids);
  // Poison the outputs: every word must be written.
  ISER_CUDA_CHECK(cudaMemset(d_counts.ptr, 0x5a, want.size() * sizeof(int32_t)));
  ISER_CUDA_CHECK(cudaMemset(d_tiles.ptr, 0x5a, want_tiles.size() * sizeof(int32_t)));
  ISER_CUDA_CHECK(cudaMemset(d_error.ptr, 0, sizeof(uint32_t)));
  cuda::CountParams p;
  p.topk_ids = d_ids.ptr;
  p.counts = d_counts.ptr;
  p.tile_counts = d_tiles.ptr;
  p.error_word = d_error.ptr;
  p.num_rows = c.rows;
  p.num_routes = c.routes;
  p.num_tiles = tiles;
  p.num_experts = E;
  ISER_CUDA_CHECK(static_cast<cudaError_t>(cuda::prepare_count_kernel(cuda::count_smem_bytes(p))));
  for (int i = 0; i < replays; ++i) {
    ISER_CUDA_CHECK(static_cast<cudaError_t>(cuda::launch_count(p, nullptr)));
  }
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(d_counts.download(want.size()), want) << describe(c);
  EXPECT_EQ(d_tiles.download(want_tiles.size()), want_tiles) << describe(c);
  EXPECT_EQ(d_error.download(1)[0], any_bad ? static_cast<uint32_t>(kGpuBadExpertId) : 0u)
      << describe(c);
}

TEST(GpuCount, MatchesCpuAcrossTileAndClusterBoundaries) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(42);
  const int T = cuda::kRouteTile;
  // One tile, a few tiles (cluster = tiles), 8 tiles, more tiles than the cluster's CTAs (several
  // per CTA, more than the tiles in flight), up to the planner's route limit.
  for (const int routes : {0, 1, 5, T - 1, T, T + 1, 3 * T + 17, 8 * T, 9 * T - 3, 24 * T,
                           33 * T + 1, kGpuMaxRoutesPerRank}) {
    for (const int experts : {1, 13, 384, 1024}) {
      if (routes == kGpuMaxRoutesPerRank && experts != 1024) continue;
      CountCase c;
      c.routes = routes;
      c.experts = experts;
      c.rows = routes <= 3 * T + 17 ? 3 : 1;
      c.none_share = 0.1;
      expect_counts_match(c, make_ids(c, rng));
    }
  }
}

TEST(GpuCount, BadIdsAreIgnoredAndReported) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (const int routes : {1, 300, 5000, 49152}) {
    CountCase c;
    c.rows = 2;
    c.routes = routes;
    c.experts = 26;
    c.bad_share = routes == 1 ? 1.0 : 0.01;
    c.none_share = 0.2;
    expect_counts_match(c, make_ids(c, rng));
  }
  // Only -1 ids: no error.
  CountCase none;
  none.routes = 4000;
  none.none_share = 1.0;
  expect_counts_match(none, make_ids(none, rng));
}

TEST(GpuCount, SkewedIdsAndManyRows) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  CountCase c;
  c.rows = 64;  // P = 64 logical ranks at decode sizes
  c.routes = 256 * 8;
  c.skewed = true;
  expect_counts_match(c, make_ids(c, rng));
  c.rows = 2;
  c.routes = 49152;
  expect_counts_match(c, make_ids(c, rng), 3);  // relaunches: no state between launches
}

// Through GpuPlanner: tau = 0 and tau = 1, and inside a graph replayed on new ids.
TEST(GpuCount, PlannerCountInAGraph) {
  SKIP_WITHOUT_GPU();
  const Topology topo = Topology::make(4, 12, 2);
  const int k = 3;
  GpuPlanner planner(topo, 1000 * k, {}, 4);
  DeviceBuffer<int32_t> d_ids(size_t{4} * 1000 * k);
  DeviceBuffer<int32_t> d_counts(size_t{4} * 12);
  ISER_CUDA_CHECK(cudaMemset(d_counts.ptr, 0x5a, 4 * 12 * sizeof(int32_t)));
  planner.count(d_ids.ptr, 0, k, d_counts.ptr, nullptr, 4);  // tau = 0: zero rows
  EXPECT_EQ(d_counts.download(48), std::vector<int32_t>(48, 0));
  std::vector<int32_t> one = {2, 11, -1};
  d_ids.upload(one);
  planner.count(d_ids.ptr, 1, k, d_counts.ptr, nullptr, 1);  // tau = 1
  std::vector<int32_t> want(12, 0);
  want[2] = want[11] = 1;
  EXPECT_EQ(d_counts.download(12), want);

  cudaStream_t stream;
  ISER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ISER_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  planner.count(d_ids.ptr, 1000, k, d_counts.ptr, stream, 4);
  ISER_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ISER_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::mt19937 rng(5);
  for (int replay = 0; replay < 3; ++replay) {
    std::vector<int32_t> ids(size_t{4} * 1000 * k);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 12);
    d_ids.upload(ids);
    ISER_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    ISER_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<int32_t> rows(48, 0);
    for (size_t i = 0; i < ids.size(); ++i) ++rows[(i / (1000 * k)) * 12 + ids[i]];
    EXPECT_EQ(d_counts.download(48), rows) << "replay " << replay;
  }
  ISER_CUDA_CHECK(cudaGraphExecDestroy(exec));
  ISER_CUDA_CHECK(cudaGraphDestroy(graph));
  ISER_CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(planner.read_errors(), 0u);
}

}  // namespace
}  // namespace iser
