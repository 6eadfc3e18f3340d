// Host helpers shared by the planner and decode-path benchmarks: the CUDA error check, the
// median, graph capture, the empty kernel of the protocol floor, and the default data path.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// NOTE: no ISER_CUDA_CHECK here: its fmt format strings do not build under nvcc.
#define BENCH_CUDA(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s in %s at %s:%d\n", cudaGetErrorName(e_), #expr, \
                   __FILE__, __LINE__);                                                   \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace iser::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Graph of whatever `capture` enqueues on `stream`.
template <typename Capture>
cudaGraphExec_t make_graph(cudaStream_t stream, Capture&& capture) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  capture();
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return exec;
}

// Does nothing: timed like the work, it gives the floor of the protocol (events around one launch
// or graph replay right after an L2 flush), below which no kernel can be measured.
__global__ inline void empty_kernel() {}

// Default input: the real histograms, $ISER_SHARED_DATA/dsv41-flash/coding.csv when the variable
// is set (as for the GPU tests), else beside the checkout: <repo>/../shared/data/dsv41-flash/.
inline std::string default_data_path() {
  if (const char* dir = std::getenv("ISER_SHARED_DATA"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/dsv41-flash/coding.csv";
  }
  const std::string here = __FILE__;  // <repo>/bench/gpu/bench_util.cuh
  const size_t cut = here.rfind("/bench/gpu/");
  return (cut == std::string::npos ? std::string(".") : here.substr(0, cut)) +
         "/../shared/data/dsv41-flash/coding.csv";
}

// "8,16,32" -> {8, 16, 32} (the benches' list flags).
inline std::vector<int> int_list(const char* v) {
  std::vector<int> out;
  for (const char* s = v; *s != '\0';) {
    out.push_back(std::atoi(s));
    const char* comma = std::strchr(s, ',');
    s = comma != nullptr ? comma + 1 : s + std::strlen(s);
  }
  return out;
}

// Exits (code 2) unless `iters` timed replays are enough for a median the pages can quote.
inline void require_timed_replays(int iters) {
  if (iters < 200) {
    std::fprintf(stderr, "-n %d: at least 200 timed replays are needed for the median\n", iters);
    std::exit(2);
  }
}

}  // namespace iser::bench
