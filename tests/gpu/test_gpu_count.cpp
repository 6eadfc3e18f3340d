// Count kernel == CPU: count rows and per-tile histograms (the rewrite kernels' route ordinals)
// over row lengths around the tile and cluster boundaries, rows starting 0-3 ids past a 16-byte
// boundary, E not a multiple of 4, -1 ids, ids out of range (kGpuBadExpertId), tau = 0 / 1,
// several rows, skewed and uniform ids, graph replays;
// the count inside the exchange kernel (Runtime::count_and_exchange) on P logical ranks, its
// matrix, rows and tile counts (through the fused plan + rewrite) against the CPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/planner_kernels.h"
#include "gpu/planner_batches.h"
#include "iser/counts.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/planner.h"
#include "iser/rewrite.h"
#include "iser/runtime.h"

namespace iser {
namespace {

using namespace planner_test;

struct CountCase {
  int rows = 1;
  int routes = 0;
  int experts = 384;
  double bad_share = 0.0;   // ids out of range
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

// Launches the count kernel on `ids` and checks counts, tile counts and the error bit. The rows
// start `offset` ids into the buffer, between ids of expert 0 that must not be counted.
void expect_counts_match(const CountCase& c, const std::vector<int32_t>& ids, int replays = 1,
                         int offset = 0) {
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
  std::vector<int32_t> padded(offset + ids.size() + 4, 0);
  std::copy(ids.begin(), ids.end(), padded.begin() + offset);
  DeviceBuffer<int32_t> d_ids(padded.size());
  DeviceBuffer<int32_t> d_counts(want.size());
  DeviceBuffer<int32_t> d_tiles(want_tiles.size());
  DeviceBuffer<uint32_t> d_error(1);
  d_ids.upload(padded);
  // Poison the outputs: every word must be written.
  ISER_CUDA_CHECK(cudaMemset(d_counts.ptr, 0x5a, want.size() * sizeof(int32_t)));
  ISER_CUDA_CHECK(cudaMemset(d_tiles.ptr, 0x5a, want_tiles.size() * sizeof(int32_t)));
  ISER_CUDA_CHECK(cudaMemset(d_error.ptr, 0, sizeof(uint32_t)));
  cuda::CountParams p;
  p.topk_ids = d_ids.ptr + offset;
  p.counts = d_counts.ptr;
  p.tile_counts = d_tiles.ptr;
  p.error_word = d_error.ptr;
  p.num_rows = c.rows;
  p.num_routes = c.routes;
  p.num_tiles = tiles;
  p.num_experts = E;
  cuda::prepare_count_kernel(cuda::count_smem_bytes(p));
  for (int i = 0; i < replays; ++i) {
    cuda::launch_count(p, nullptr);
  }
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
  const std::string what = describe(c) + ", offset " + std::to_string(offset);
  EXPECT_EQ(d_counts.download(want.size()), want) << what;
  EXPECT_EQ(d_tiles.download(want_tiles.size()), want_tiles) << what;
  EXPECT_EQ(d_error.download(1)[0], any_bad ? static_cast<uint32_t>(kGpuBadExpertId) : 0u) << what;
}

TEST(GpuCount, MatchesCpuAcrossTileAndClusterBoundaries) {
  ISER_REQUIRE_GPUS(1);
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

// Rows that start 0-3 ids past a 16-byte boundary (offset views, rows of any length): every id of
// the unaligned head and tail of each tile is counted once, none outside the row.
TEST(GpuCount, UnalignedRowStartsAndLengths) {
  ISER_REQUIRE_GPUS(1);
  std::mt19937 rng(19);
  const int T = cuda::kRouteTile;
  for (const int offset : {0, 1, 2, 3}) {
    for (const int routes : {1, 2, 3, 4, 5, 7, T - 3, T - 1, T, T + 1, T + 3, 2 * T + 2, 9 * T - 3,
                             24 * T + 1, 40 * T + 3}) {
      for (const int experts : {13, 384}) {
        CountCase c;
        c.rows = routes <= 9 * T ? 3 : 2;
        c.routes = routes;
        c.experts = experts;
        c.none_share = 0.1;
        c.bad_share = routes == T + 1 ? 0.002 : 0.0;
        expect_counts_match(c, make_ids(c, rng), 1, offset);
      }
    }
  }
  // A single bad id in a tile's unaligned head, then in its tail: still reported.
  for (const int position : {0, 2, T - 1, T + 2}) {
    CountCase c;
    c.routes = T + 3;
    c.experts = 384;
    std::vector<int32_t> ids(c.routes, 7);
    ids[position] = 384;
    expect_counts_match(c, ids, 1, 1);
  }
}

TEST(GpuCount, BadIdsAreIgnoredAndReported) {
  ISER_REQUIRE_GPUS(1);
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
  ISER_REQUIRE_GPUS(1);
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
  ISER_REQUIRE_GPUS(1);
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

// count_and_exchange: the matrix every rank sees, the rows, the error bit, and the tile counts
// through plan_rewrite_all (slot ids == rewrite_tokens). E = 15 takes the 4-byte row path.
TEST(GpuCount, CountInsideTheExchange) {
  ISER_REQUIRE_GPUS(1);
  for (const auto& [P, E, tokens] :
       {std::tuple{8, 384, 256}, std::tuple{5, 15, 700}, std::tuple{16, 64, 300}}) {
    const int k = 4;
    const int n = tokens * k;
    RuntimeConfig config;
    config.num_ranks = P;
    config.num_experts = E;
    config.num_slots = 2;
    config.bundle = {4096, 256};
    const auto rt = Runtime::logical(config);
    const Topology topo = Topology::make(P, E, 2);
    GpuPlanner planner(topo, n, {}, P);
    DeviceBuffer<int32_t> d_ids(static_cast<size_t>(P) * n);
    DeviceBuffer<int32_t> d_rows(static_cast<size_t>(P) * E);
    DeviceBuffer<int32_t> d_matrix(static_cast<size_t>(P) * P * E);
    DeviceBuffer<int32_t> d_plan(planner.plan_words());
    DeviceBuffer<int32_t> d_slots(static_cast<size_t>(P) * n);
    std::mt19937 rng(11 + P);
    for (uint64_t epoch = 1; epoch <= 4; ++epoch) {
      const std::string what = "P " + std::to_string(P) + " epoch " + std::to_string(epoch);
      CountCase c;
      c.rows = P;
      c.routes = n;
      c.experts = E;
      c.skewed = true;
      c.none_share = 0.05;
      c.bad_share = epoch == 4 ? 0.01 : 0.0;  // the last epoch reports bad ids
      std::vector<int32_t> ids = make_ids(c, rng);
      d_ids.upload(ids);
      const GpuPlanner::CountOutputs out = planner.count_outputs(tokens, k, P);
      Runtime::CountInput in;
      in.topk_ids = d_ids.ptr;
      in.num_routes = n;
      in.rows = d_rows.ptr;
      in.tile_counts = out.tile_counts;
      in.error_word = out.error_word;
      planner.clear_errors(nullptr);
      rt->count_and_exchange(in, d_matrix.ptr, epoch, nullptr);
      planner.plan_rewrite_all(d_matrix.ptr, d_plan.ptr, d_ids.ptr, tokens, k, 1, d_slots.ptr,
                               nullptr);
      ISER_CUDA_CHECK(cudaDeviceSynchronize());
      for (auto& id : ids) {
        if (id < -1 || id >= E) id = -1;  // ignored by the GPU, as by the CPU's -1
      }
      const CountMatrix counts = CountMatrix::from_topk(ids, P, tokens, k, E);
      const std::vector<int32_t> want(counts.data().begin(), counts.data().end());
      EXPECT_EQ(d_rows.download(want.size()), want) << what;
      const auto matrix = d_matrix.download(static_cast<size_t>(P) * P * E);
      for (int r = 0; r < P; ++r) {
        EXPECT_TRUE(std::equal(want.begin(), want.end(), matrix.begin() + size_t{1} * r * P * E))
            << what << " rank " << r;
      }
      const Plan cpu = plan_halo_q(topo, counts);
      EXPECT_TRUE(download_plan(planner.layout(), d_plan.ptr) == cpu) << what;
      const auto slots = d_slots.download(static_cast<size_t>(P) * n);
      std::vector<int32_t> want_slots(n);
      for (int r = 0; r < P; ++r) {
        rewrite_tokens(topo, counts, cpu, r,
                       std::span<const int32_t>(ids).subspan(static_cast<size_t>(r) * n, n), k,
                       want_slots);
        EXPECT_TRUE(std::equal(want_slots.begin(), want_slots.end(),
                               slots.begin() + static_cast<size_t>(r) * n))
            << what << " rank " << r;
      }
      EXPECT_EQ(planner.read_errors(), epoch == 4 ? static_cast<uint32_t>(kGpuBadExpertId) : 0u)
          << what;
    }
    rt->check_status();
  }
}

}  // namespace
}  // namespace iser
