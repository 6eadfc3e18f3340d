// Decode control path benchmark (docs/design.md §9, §11): count -> count exchange -> plan ->
// rewrite of P logical ranks on one GPU, captured in one CUDA graph, and the count kernel alone.
//
// Path: GpuPlanner::count of the P ranks' rows (one launch), Runtime::exchange_counts (every
// rank's row to every rank, kDeviceGeneration epochs so the graph replays), and
// GpuPlanner::plan_rewrite_all of one plan over all P rows (the P ranks' matrices are identical,
// so one plan CTA stands for each rank's own planner; every rank's routes are rewritten). CUDA
// events around one graph replay, L2 flushed before every replay, inputs cycled; medians. Each
// stage is also timed alone (its own graph, same protocol), beside the empty graph's time.
// cx_path: the same path with the count inside the exchange kernel (Runtime::count_and_exchange):
// two launches instead of three; cx: that kernel alone.
// Inputs: tokens sampled from the bundled real histograms (docs/design.md §8 sampling rule).
//
// Count section: one row of tau*k ids (-r sizes) into E bins; events around one graph replay (L2
// flushed), the in-kernel span (first CTA start to last CTA end, globaltimer) and the per-launch
// time inside a graph of 100 launches (L2 warm), beside the previous kernel (kept below: ids
// loaded after the zeroing, two cluster barriers) timed the same way, and the protocol's floor
// (floor_kern_us: a kernel that only loads the row's ids once and stores a word per thread, one
// CTA per tile, same timer); -o N starts the row N ids past a 16-byte boundary.
//
//   bench_decode_path [-p 8,16,32,64] [-E 384] [-S 4] [-t 256] [-k 8] [-r 49152,1536] [-o 0]
//                     [-w 20] [-n 400] [-i 8] [-c 1] [-d coding.csv]
//   -c 1 checks every count matrix, plan and slot id of the graph against the CPU (plan_halo_q,
//   rewrite_tokens); the count section always checks both kernels' rows and tile rows.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../../tests/gpu/routing_samples.h"
#include "bench_util.cuh"
#include "cuda/planner_kernels.h"
#include "cuda/sync.cuh"
#include "iser/counts.h"
#include "iser/gpu_planner.h"
#include "iser/planner.h"
#include "iser/rewrite.h"
#include "iser/runtime.h"

namespace {

using iser::bench::empty_kernel;
using iser::bench::int_list;
using iser::bench::make_graph;
using iser::bench::median;

struct Args {
  std::vector<int> ranks = {8, 16, 32, 64};
  std::vector<int> count_sizes = {49152, 1536};
  int experts = 384;
  int slots = 4;
  int tokens = 256;
  int top_k = 8;
  int warmup = 20;
  int iters = 400;
  int inputs = 8;
  int count_offset = 0;  // -o: ids the count section's row starts past a 16-byte boundary
  bool check = true;
  std::string data;
};

Args parse(int argc, char** argv) {
  Args a;
  a.data = iser::bench::default_data_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "-p") {
      a.ranks = int_list(v);
    } else if (flag == "-r") {
      a.count_sizes = int_list(v);
    } else if (flag == "-E") {
      a.experts = std::atoi(v);
    } else if (flag == "-S") {
      a.slots = std::atoi(v);
    } else if (flag == "-t") {
      a.tokens = std::atoi(v);
    } else if (flag == "-k") {
      a.top_k = std::atoi(v);
    } else if (flag == "-w") {
      a.warmup = std::atoi(v);
    } else if (flag == "-n") {
      a.iters = std::atoi(v);
    } else if (flag == "-i") {
      a.inputs = std::max(1, std::atoi(v));
    } else if (flag == "-o") {
      a.count_offset = std::max(0, std::atoi(v));
    } else if (flag == "-c") {
      a.check = std::atoi(v) != 0;
    } else if (flag == "-d") {
      a.data = v;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  iser::bench::require_timed_replays(a.iters);
  return a;
}

// Events around graphs[j % size] replays, L2 flushed (flush_bytes > 0) before each; `before(j)`
// runs outside the events (timer resets). Median us.
template <typename Before>
double time_graphs(const Args& args, const std::vector<cudaGraphExec_t>& graphs,
                   cudaStream_t stream, void* flush, size_t flush_bytes, Before&& before) {
  const int total = args.warmup + args.iters;
  std::vector<cudaEvent_t> start(total), stop(total);
  for (int j = 0; j < total; ++j) {
    BENCH_CUDA(cudaEventCreate(&start[j]));
    BENCH_CUDA(cudaEventCreate(&stop[j]));
  }
  for (int j = 0; j < total; ++j) {
    if (flush_bytes > 0) BENCH_CUDA(cudaMemsetAsync(flush, j & 0xff, flush_bytes, stream));
    before(j);
    BENCH_CUDA(cudaEventRecord(start[j], stream));
    BENCH_CUDA(cudaGraphLaunch(graphs[j % graphs.size()], stream));
    BENCH_CUDA(cudaEventRecord(stop[j], stream));
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> us;
  for (int j = args.warmup; j < total; ++j) {
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start[j], stop[j]));
    us.push_back(ms * 1e3);
  }
  for (int j = 0; j < total; ++j) {
    BENCH_CUDA(cudaEventDestroy(start[j]));
    BENCH_CUDA(cudaEventDestroy(stop[j]));
  }
  return median(us);
}

double time_graphs(const Args& args, const std::vector<cudaGraphExec_t>& graphs,
                   cudaStream_t stream, void* flush, size_t flush_bytes) {
  return time_graphs(args, graphs, stream, flush, flush_bytes, [](int) {});
}

void destroy(std::vector<cudaGraphExec_t>& graphs) {
  for (cudaGraphExec_t g : graphs) BENCH_CUDA(cudaGraphExecDestroy(g));
  graphs.clear();
}

// The previous count kernel, the same-run baseline: a cluster of up to 8 CTAs x 512 threads per
// row, the histograms zeroed before any id is loaded (4 ids per thread and tile, 4 tiles in
// flight), the partial rows summed through distributed shared memory between two cluster
// barriers; one CTA at one tile.
constexpr int kPrevThreads = 512;
constexpr int kPrevTilesInFlight = 4;
constexpr int kPrevRoutesPerThread = iser::cuda::kRouteTile / kPrevThreads;

int previous_count_ctas(int num_tiles) {
  return std::min(num_tiles, 8);
}
int previous_count_smem(int num_tiles, int E) {
  const int ctas = previous_count_ctas(num_tiles);
  return static_cast<int>(sizeof(int32_t)) * ((num_tiles + ctas - 1) / ctas + 1) * E;
}

__global__ void __launch_bounds__(kPrevThreads)
    previous_count_kernel(const iser::cuda::CountParams p, int tiles_per_cta) {
  namespace cg = cooperative_groups;
  extern __shared__ int32_t smem[];
  if (p.timer != nullptr && threadIdx.x == 0)
    atomicMin(p.timer, static_cast<unsigned long long>(iser::cuda::globaltimer_ns()));
  const int tid = static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int cta = static_cast<int>(blockIdx.x);
  const int num_ctas = static_cast<int>(gridDim.x);
  const int E = p.num_experts;
  const int my_tiles = (p.num_tiles - cta + num_ctas - 1) / num_ctas;
  int32_t* hist = smem;
  int32_t* partial = smem + tiles_per_cta * E;
  for (int i = tid; i < my_tiles * E; i += kPrevThreads) hist[i] = 0;
  __syncthreads();
  const int32_t* ids = p.topk_ids + static_cast<int64_t>(row) * p.num_routes;
  bool bad = false;
  for (int first = 0; first < my_tiles; first += kPrevTilesInFlight) {
    int32_t id[kPrevTilesInFlight][kPrevRoutesPerThread];
#pragma unroll
    for (int j = 0; j < kPrevTilesInFlight; ++j) {
      const int base = (cta + (first + j) * num_ctas) * iser::cuda::kRouteTile + tid;
#pragma unroll
      for (int i = 0; i < kPrevRoutesPerThread; ++i) {
        const int idx = base + i * kPrevThreads;
        id[j][i] = first + j < my_tiles && idx < p.num_routes ? __ldg(ids + idx) : -1;
      }
    }
#pragma unroll
    for (int j = 0; j < kPrevTilesInFlight; ++j) {
#pragma unroll
      for (int i = 0; i < kPrevRoutesPerThread; ++i) {
        const int32_t v = id[j][i];
        if (v >= 0 && v < E) {
          atomicAdd(&hist[(first + j) * E + v], 1);
        } else if (v != -1) {
          bad = true;
        }
      }
    }
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(p.error_word, iser::kGpuBadExpertId);
  int32_t* tile_rows = p.tile_counts + static_cast<int64_t>(row) * p.num_tiles * E;
  int32_t* out = p.counts + static_cast<int64_t>(row) * E;
  for (int e = tid; e < E; e += kPrevThreads) {
    int32_t sum = 0;
    for (int j = 0; j < my_tiles; ++j) {
      const int32_t n = hist[j * E + e];
      tile_rows[static_cast<int64_t>(cta + j * num_ctas) * E + e] = n;
      sum += n;
    }
    (num_ctas == 1 ? out : partial)[e] = sum;
  }
  if (num_ctas > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int slice = (E + num_ctas - 1) / num_ctas;
    const int end = min(E, (cta + 1) * slice);
    for (int e = cta * slice + tid; e < end; e += kPrevThreads) {
      int32_t sum = 0;
      for (int c = 0; c < num_ctas; ++c) sum += cluster.map_shared_rank(partial, c)[e];
      out[e] = sum;
    }
    cluster.sync();
  }
  if (p.timer != nullptr) {
    __syncthreads();
    if (tid == 0)
      atomicMax(p.timer + 1, static_cast<unsigned long long>(iser::cuda::globaltimer_ns()));
  }
}

void launch_previous_count(const iser::cuda::CountParams& p, cudaStream_t stream) {
  const auto ctas = static_cast<unsigned>(previous_count_ctas(p.num_tiles));
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {ctas, 1, 1};
  const cudaLaunchConfig_t config{
      dim3(ctas, static_cast<unsigned>(p.num_rows)),
      dim3(kPrevThreads),
      static_cast<size_t>(previous_count_smem(p.num_tiles, p.num_experts)),
      stream,
      &cluster,
      ctas > 1 ? 1u : 0u};
  BENCH_CUDA(
      cudaLaunchKernelEx(&config, previous_count_kernel, p,
                         (p.num_tiles + static_cast<int>(ctas) - 1) / static_cast<int>(ctas)));
}

std::vector<int32_t> download(const int32_t* d, size_t n) {
  std::vector<int32_t> h(n);
  BENCH_CUDA(cudaMemcpy(h.data(), d, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return h;
}

std::vector<int32_t> sample_ids(const Args& args, const std::vector<double>& weights, int rows,
                                int tokens, uint64_t seed) {
  std::vector<double> w(weights.begin(), weights.end());
  w.resize(args.experts, 0.0);
  std::vector<int32_t> ids(static_cast<size_t>(rows) * tokens * args.top_k);
  iser::gpu_test::sample_tokens(w, rows, tokens, args.top_k, 0.0, seed, ids.data());
  return ids;
}

// The protocol's floor for a count kernel: one CTA of 512 threads per tile, each thread loading
// its ids of the tile once (kRouteTile / 512 independent loads) and storing one word, one block
// barrier, the same timer as count_kernel. No histogram: what any kernel that reads the row once
// pays under this protocol (launch, the first loads from a flushed L2, the store, the barrier).
__global__ void __launch_bounds__(512)
    load_floor_kernel(const int32_t* ids, int num_routes, int32_t* out, unsigned long long* timer) {
  if (timer != nullptr && threadIdx.x == 0)
    atomicMin(timer, static_cast<unsigned long long>(iser::cuda::globaltimer_ns()));
  const int begin = static_cast<int>(blockIdx.x) * iser::cuda::kRouteTile;
  int32_t sum = 0;
#pragma unroll
  for (int k = 0; k < iser::cuda::kRouteTile / 512; ++k) {
    const int i = begin + k * 512 + static_cast<int>(threadIdx.x);
    if (i < num_routes) sum += ids[i];
  }
  out[static_cast<int64_t>(blockIdx.x) * 512 + threadIdx.x] = sum;
  if (timer != nullptr) {
    __syncthreads();
    if (threadIdx.x == 0)
      atomicMax(timer + 1, static_cast<unsigned long long>(iser::cuda::globaltimer_ns()));
  }
}

// Events around one graph replay (L2 flushed) and the in-kernel span of `launch(timer)`:
// {events us, span us}.
template <typename Launch>
std::pair<double, double> time_count(const Args& args, cudaStream_t stream, void* flush,
                                     size_t flush_bytes, unsigned long long* timer,
                                     Launch&& launch) {
  std::vector<cudaGraphExec_t> g{make_graph(stream, [&] { launch(nullptr); })};
  const double ev = time_graphs(args, g, stream, flush, flush_bytes);
  destroy(g);
  // In-kernel span: the timed launch records it (a graph of its own, timer reset outside).
  std::vector<cudaGraphExec_t> g_timed{make_graph(stream, [&] { launch(timer); })};
  std::vector<double> spans;
  const unsigned long long reset[2] = {~0ull, 0ull};
  for (int j = 0; j < args.warmup + args.iters; ++j) {
    BENCH_CUDA(cudaMemsetAsync(flush, j & 0xff, flush_bytes, stream));
    BENCH_CUDA(cudaMemcpyAsync(timer, reset, sizeof(reset), cudaMemcpyHostToDevice, stream));
    BENCH_CUDA(cudaGraphLaunch(g_timed[0], stream));
    unsigned long long span[2];
    BENCH_CUDA(cudaMemcpyAsync(span, timer, sizeof(span), cudaMemcpyDeviceToHost, stream));
    BENCH_CUDA(cudaStreamSynchronize(stream));
    if (j >= args.warmup) spans.push_back((span[1] - span[0]) * 1e-3);
  }
  destroy(g_timed);
  return {ev, median(spans)};
}

// Count section: returns false when a count row or tile row differs from the CPU's. -o shifts
// the row start by that many ids (unaligned rows: the new kernel's scalar head and tail).
bool bench_count(const Args& args, const std::vector<std::vector<double>>& layers,
                 cudaStream_t stream, void* flush, size_t flush_bytes, double floor_us) {
  using namespace iser;
  const int E = args.experts;
  std::printf(
      "# count: one row of tau*k ids (row start %d ids past a 16-byte boundary) into E = %d "
      "bins; events around one graph replay (L2 flushed), in-kernel span (L2 flushed), per "
      "launch in a graph of 100 (L2 warm); median of %d; empty graph %.2f us\n",
      args.count_offset, E, args.iters, floor_us);
  std::printf("%8s %10s %10s %12s %10s %10s %12s %10s %13s %7s\n", "routes", "new_ev_us",
              "new_kern_us", "new_graph100", "prev_ev_us", "prev_kern_us", "prev_graph100",
              "kern_ratio", "floor_kern_us", "check");
  bool ok = true;
  unsigned long long* timer = nullptr;
  uint32_t* error_word = nullptr;
  BENCH_CUDA(cudaMalloc(&timer, 2 * sizeof(unsigned long long)));
  BENCH_CUDA(cudaMalloc(&error_word, sizeof(uint32_t)));
  BENCH_CUDA(cudaMemset(error_word, 0, sizeof(uint32_t)));
  for (const int n : args.count_sizes) {
    const int tiles = iser::cuda::num_route_tiles(n);
    const auto ids = sample_ids(args, layers[3 % layers.size()], 1, n / args.top_k, 77 + n);
    const int routes = static_cast<int>(ids.size());
    int32_t *d_ids, *d_counts, *d_prev_counts, *d_tiles, *d_prev_tiles;
    BENCH_CUDA(cudaMalloc(&d_ids, sizeof(int32_t) * (routes + args.count_offset)));
    BENCH_CUDA(cudaMalloc(&d_counts, sizeof(int32_t) * E));
    BENCH_CUDA(cudaMalloc(&d_prev_counts, sizeof(int32_t) * E));
    BENCH_CUDA(cudaMalloc(&d_tiles, sizeof(int32_t) * tiles * E));
    BENCH_CUDA(cudaMalloc(&d_prev_tiles, sizeof(int32_t) * tiles * E));
    BENCH_CUDA(cudaMemcpy(d_ids + args.count_offset, ids.data(), sizeof(int32_t) * routes,
                          cudaMemcpyHostToDevice));
    iser::cuda::CountParams p;
    p.topk_ids = d_ids + args.count_offset;
    p.counts = d_counts;
    p.tile_counts = d_tiles;
    p.error_word = error_word;
    p.num_rows = 1;
    p.num_routes = routes;
    p.num_tiles = tiles;
    p.num_experts = E;
    iser::cuda::CountParams prev = p;
    prev.counts = d_prev_counts;
    prev.tile_counts = d_prev_tiles;
    iser::cuda::prepare_count_kernel(iser::cuda::count_smem_bytes(p));
    BENCH_CUDA(cudaFuncSetAttribute(previous_count_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    previous_count_smem(tiles, E)));
    const auto launch_new = [&](unsigned long long* t) {
      iser::cuda::CountParams q = p;
      q.timer = t;
      iser::cuda::launch_count(q, stream);
    };
    const auto launch_prev = [&](unsigned long long* t) {
      iser::cuda::CountParams q = prev;
      q.timer = t;
      launch_previous_count(q, stream);
    };
    const auto [prev_ev, prev_kern] =
        time_count(args, stream, flush, flush_bytes, timer, launch_prev);
    const auto [new_ev, new_kern] = time_count(args, stream, flush, flush_bytes, timer, launch_new);
    int32_t* d_floor_out = nullptr;
    BENCH_CUDA(cudaMalloc(&d_floor_out, sizeof(int32_t) * tiles * 512));
    const auto launch_floor = [&](unsigned long long* t) {
      load_floor_kernel<<<tiles, 512, 0, stream>>>(p.topk_ids, routes, d_floor_out, t);
      BENCH_CUDA(cudaGetLastError());
    };
    const double floor_kern =
        time_count(args, stream, flush, flush_bytes, timer, launch_floor).second;
    BENCH_CUDA(cudaFree(d_floor_out));
    std::vector<cudaGraphExec_t> g_new100{make_graph(stream, [&] {
      for (int i = 0; i < 100; ++i) launch_new(nullptr);
    })};
    std::vector<cudaGraphExec_t> g_prev100{make_graph(stream, [&] {
      for (int i = 0; i < 100; ++i) launch_prev(nullptr);
    })};
    const double prev100 = time_graphs(args, g_prev100, stream, flush, 0) / 100;
    const double new100 = time_graphs(args, g_new100, stream, flush, 0) / 100;
    const CountMatrix want = CountMatrix::from_topk(ids, 1, routes / args.top_k, args.top_k, E);
    const std::vector<int32_t> want_row(want.data().begin(), want.data().end());
    std::vector<int32_t> want_tiles(static_cast<size_t>(tiles) * E, 0);
    for (int i = 0; i < routes; ++i) {
      if (ids[i] >= 0 && ids[i] < E)
        ++want_tiles[static_cast<size_t>(i / iser::cuda::kRouteTile) * E + ids[i]];
    }
    uint32_t errors = 0;
    BENCH_CUDA(cudaMemcpy(&errors, error_word, sizeof(errors), cudaMemcpyDeviceToHost));
    const bool row_ok = download(d_counts, E) == want_row &&
                        download(d_prev_counts, E) == want_row &&
                        download(d_tiles, want_tiles.size()) == want_tiles &&
                        download(d_prev_tiles, want_tiles.size()) == want_tiles && errors == 0;
    ok = ok && row_ok;
    std::printf("%8d %10.2f %10.2f %12.2f %10.2f %10.2f %12.2f %10.2f %13.2f %7s\n", routes, new_ev,
                new_kern, new100, prev_ev, prev_kern, prev100, prev_kern / new_kern, floor_kern,
                row_ok ? "ok" : "FAILED");
    for (auto* g : {&g_new100, &g_prev100}) destroy(*g);
    BENCH_CUDA(cudaFree(d_ids));
    BENCH_CUDA(cudaFree(d_counts));
    BENCH_CUDA(cudaFree(d_prev_counts));
    BENCH_CUDA(cudaFree(d_tiles));
    BENCH_CUDA(cudaFree(d_prev_tiles));
  }
  BENCH_CUDA(cudaFree(timer));
  BENCH_CUDA(cudaFree(error_word));
  return ok;
}

struct PathRow {
  double path_us = 0, two_kernel_us = 0, count_us = 0, exchange_us = 0, plan_rewrite_us = 0;
  double one_launch_us = 0, count_exchange_us = 0;  // count inside the exchange kernel
  double plan_kernel_us = 0;
  bool ok = true;
};

// One EP degree: P logical ranks, the path in one graph per input. Returns its timings and check.
PathRow bench_path(const Args& args, int P, const std::vector<std::vector<double>>& layers,
                   cudaStream_t stream, void* flush, size_t flush_bytes) {
  using namespace iser;
  const int E = args.experts;
  const int n = args.tokens * args.top_k;
  const Topology topo = Topology::make(P, E, args.slots);
  RuntimeConfig config;
  config.num_ranks = P;
  config.num_experts = E;
  config.num_slots = args.slots;
  config.bundle = {4096, 256};  // the exchange does not touch the slots: keep them small
  const std::unique_ptr<Runtime> rt = Runtime::logical(config);
  GpuPlanner planner(topo, n, {}, P);
  constexpr int kTimerSlots = kGpuPlanTimerSlots + kGpuRewriteTimerSlots;
  unsigned long long* timer = nullptr;
  BENCH_CUDA(cudaMalloc(&timer, kTimerSlots * sizeof(unsigned long long)));
  BENCH_CUDA(cudaMemset(timer, 0, kTimerSlots * sizeof(unsigned long long)));

  const int num_inputs = args.inputs;
  std::vector<std::vector<int32_t>> ids(num_inputs);
  std::vector<int32_t*> d_ids(num_inputs);
  for (int i = 0; i < num_inputs; ++i) {
    ids[i] = sample_ids(args, layers[(3 + i) % layers.size()], P, args.tokens, 1000 * P + i);
    BENCH_CUDA(cudaMalloc(&d_ids[i], sizeof(int32_t) * ids[i].size()));
    BENCH_CUDA(cudaMemcpy(d_ids[i], ids[i].data(), sizeof(int32_t) * ids[i].size(),
                          cudaMemcpyHostToDevice));
  }
  int32_t *rows, *matrix, *plan, *slots;
  BENCH_CUDA(cudaMalloc(&rows, sizeof(int32_t) * P * E));
  BENCH_CUDA(cudaMalloc(&matrix, sizeof(int32_t) * P * P * E));
  BENCH_CUDA(cudaMalloc(&plan, sizeof(int32_t) * planner.plan_words()));
  BENCH_CUDA(cudaMalloc(&slots, sizeof(int32_t) * P * n));

  const auto count = [&](int i) {
    planner.count(d_ids[i], args.tokens, args.top_k, rows, stream, P);
  };
  const auto exchange = [&] { rt->exchange_counts(rows, matrix, kDeviceGeneration, stream); };
  const auto count_exchange = [&](int i) {
    const GpuPlanner::CountOutputs out = planner.count_outputs(args.tokens, args.top_k, P);
    Runtime::CountInput in;
    in.topk_ids = d_ids[i];
    in.num_routes = n;
    in.rows = rows;
    in.tile_counts = out.tile_counts;
    in.error_word = out.error_word;
    rt->count_and_exchange(in, matrix, kDeviceGeneration, stream);
  };
  // Local rank 0's copy of the matrix: every rank's copy is the same matrix.
  const auto plan_rewrite = [&](int i) {
    planner.plan_rewrite_all(matrix, plan, d_ids[i], args.tokens, args.top_k, 1, slots, stream);
  };
  const auto plan_then_rewrite = [&](int i) {
    planner.plan(matrix, plan, stream, 1);
    planner.rewrite_all(d_ids[i], args.tokens, args.top_k, matrix, plan, 1, slots, stream);
  };
  std::vector<cudaGraphExec_t> g_path, g_two, g_count, g_exchange, g_plan_rewrite, g_one,
      g_count_exchange;
  for (int i = 0; i < num_inputs; ++i) {
    g_path.push_back(make_graph(stream, [&] {
      count(i);
      exchange();
      plan_rewrite(i);
    }));
    g_two.push_back(make_graph(stream, [&] {
      count(i);
      exchange();
      plan_then_rewrite(i);
    }));
    g_count.push_back(make_graph(stream, [&] { count(i); }));
    g_one.push_back(make_graph(stream, [&] {
      count_exchange(i);
      plan_rewrite(i);
    }));
    g_count_exchange.push_back(make_graph(stream, [&] { count_exchange(i); }));
  }
  g_exchange.push_back(make_graph(stream, exchange));
  g_plan_rewrite.push_back(make_graph(stream, [&] { plan_rewrite(0); }));

  PathRow r;
  r.path_us = time_graphs(args, g_path, stream, flush, flush_bytes);
  r.two_kernel_us = time_graphs(args, g_two, stream, flush, flush_bytes);
  r.count_us = time_graphs(args, g_count, stream, flush, flush_bytes);
  r.exchange_us = time_graphs(args, g_exchange, stream, flush, flush_bytes);
  r.one_launch_us = time_graphs(args, g_one, stream, flush, flush_bytes);
  r.count_exchange_us = time_graphs(args, g_count_exchange, stream, flush, flush_bytes);
  // The plan + rewrite stage alone re-plans input 0's matrix and rewrites its ids: the path's
  // graph of input 0 runs first so that the count rows, tile counts and matrix are input 0's.
  BENCH_CUDA(cudaGraphLaunch(g_path[0], stream));
  r.plan_rewrite_us = time_graphs(args, g_plan_rewrite, stream, flush, flush_bytes);

  // The planner's in-kernel span inside the path (CTA 0's stamps; a graph captured with them).
  planner.set_plan_timer(timer);
  std::vector<cudaGraphExec_t> g_timed{make_graph(stream, [&] {
    count(0);
    exchange();
    plan_rewrite(0);
  })};
  planner.set_plan_timer(nullptr);
  std::vector<double> spans;
  for (int j = 0; j < args.warmup + args.iters; ++j) {
    BENCH_CUDA(cudaMemsetAsync(flush, j & 0xff, flush_bytes, stream));
    BENCH_CUDA(cudaGraphLaunch(g_timed[0], stream));
    unsigned long long t[kTimerSlots];
    BENCH_CUDA(cudaMemcpyAsync(t, timer, sizeof(t), cudaMemcpyDeviceToHost, stream));
    BENCH_CUDA(cudaStreamSynchronize(stream));
    if (j >= args.warmup) spans.push_back((t[kGpuPlanTimerSlots - 2] - t[0]) * 1e-3);
  }
  r.plan_kernel_us = median(spans);

  if (args.check) {
    planner.clear_errors(stream);
    for (int i = 0; i < num_inputs && r.ok; ++i) {
      for (auto* graphs : {&g_path, &g_two, &g_one}) {
        BENCH_CUDA(cudaGraphLaunch((*graphs)[i], stream));
        BENCH_CUDA(cudaStreamSynchronize(stream));
        const CountMatrix counts = CountMatrix::from_topk(ids[i], P, args.tokens, args.top_k, E);
        const std::vector<int32_t> want(counts.data().begin(), counts.data().end());
        const auto got = download(matrix, static_cast<size_t>(P) * P * E);
        for (int l = 0; l < P; ++l) {
          r.ok = r.ok && std::equal(want.begin(), want.end(), got.begin() + size_t{1} * l * P * E);
        }
        const Plan cpu = plan_halo_q(topo, counts);
        r.ok = r.ok && download_plan(planner.layout(), plan) == cpu;
        const auto got_slots = download(slots, static_cast<size_t>(P) * n);
        std::vector<int32_t> want_slots(n);
        for (int s = 0; s < P; ++s) {
          rewrite_tokens(topo, counts, cpu, s,
                         std::span<const int32_t>(ids[i]).subspan(static_cast<size_t>(s) * n, n),
                         args.top_k, want_slots);
          r.ok = r.ok && std::equal(want_slots.begin(), want_slots.end(),
                                    got_slots.begin() + static_cast<size_t>(s) * n);
        }
      }
    }
    r.ok = r.ok && planner.read_errors() == 0;
    try {
      rt->check_status();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "runtime status: %s\n", e.what());
      r.ok = false;
    }
  }
  for (auto* g : {&g_path, &g_two, &g_count, &g_exchange, &g_plan_rewrite, &g_timed, &g_one,
                  &g_count_exchange}) {
    destroy(*g);
  }
  for (int32_t* d : d_ids) BENCH_CUDA(cudaFree(d));
  for (int32_t* d : {rows, matrix, plan, slots}) BENCH_CUDA(cudaFree(d));
  BENCH_CUDA(cudaFree(timer));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const auto layers = iser::gpu_test::read_histogram_csv(args.data);
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t flush_bytes = std::max<size_t>(size_t{4} * prop.l2CacheSize, size_t{256} << 20);
  void* flush = nullptr;
  BENCH_CUDA(cudaMalloc(&flush, flush_bytes));
  std::vector<cudaGraphExec_t> g_empty{
      make_graph(stream, [&] { empty_kernel<<<1, 32, 0, stream>>>(); })};
  // Warm the clocks before the floor: timed first, it would include the ramp.
  time_graphs(args, g_empty, stream, flush, flush_bytes);
  const double floor_us = time_graphs(args, g_empty, stream, flush, flush_bytes);
  std::printf("# %s, %d SMs; empty graph (one empty kernel) timed the same way: %.2f us\n",
              prop.name, prop.multiProcessorCount, floor_us);
  bool ok = bench_count(args, layers, stream, flush, flush_bytes, floor_us);

  std::printf(
      "# decode path: P logical ranks on one GPU, E = %d, S = %d, tau = %d per rank, k = %d; "
      "count -> exchange -> plan + rewrite in one graph, events around the replay, L2 "
      "flushed, median of %d over %d inputs\n",
      args.experts, args.slots, args.tokens, args.top_k, args.iters, args.inputs);
  std::printf("%4s %10s %10s %10s %10s %10s %10s %12s %12s %9s %8s\n", "P", "path_us", "two_k_us",
              "cx_path_us", "count_us", "exch_us", "cx_us", "plan+rw_us", "plan_kern_us",
              "empty_us", "check");
  for (const int P : args.ranks) {
    if (P <= 0) continue;  // -p 0: the count section only
    const PathRow r = bench_path(args, P, layers, stream, flush, flush_bytes);
    ok = ok && r.ok;
    std::printf("%4d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %12.2f %12.2f %9.2f %8s\n", P,
                r.path_us, r.two_kernel_us, r.one_launch_us, r.count_us, r.exchange_us,
                r.count_exchange_us, r.plan_rewrite_us, r.plan_kernel_us, floor_us,
                !args.check ? "-" : (r.ok ? "ok" : "FAILED"));
    std::fflush(stdout);
  }
  destroy(g_empty);
  BENCH_CUDA(cudaFree(flush));
  BENCH_CUDA(cudaStreamDestroy(stream));
  return ok ? 0 : 1;
}
