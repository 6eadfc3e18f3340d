// Shared helpers of the MoE-layer GPU tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda/device_buffer.h"
#include "gpu/gpu_test_util.h"
#include "iser/error.h"

namespace iser::moe::testing {

using cuda::DeviceBuffer;

inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

inline std::vector<uint16_t> download(const void* ptr, size_t elems) {
  std::vector<uint16_t> host(elems);
  ISER_CUDA_CHECK(cudaMemcpy(host.data(), ptr, elems * 2, cudaMemcpyDeviceToHost));
  return host;
}

// Captures what `enqueue(stream)` puts on `stream` into a CUDA graph, launches the graph
// `launches` times on `stream` and waits for it.
template <typename Enqueue>
void run_captured(cudaStream_t stream, Enqueue&& enqueue, int launches = 1) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ISER_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue(stream);
  ISER_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ISER_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < launches; ++i) ISER_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  ISER_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Every rank of `comm` past every GPU operation enqueued so far (an NCCL all-reduce of one float
// in `scratch`, then a device synchronize).
inline void rank_barrier(ncclComm_t comm, DeviceBuffer& scratch) {
  ISER_NCCL_CHECK(
      ncclAllReduce(scratch.get(), scratch.get(), 1, ncclFloat, ncclSum, comm, nullptr));
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
}

// The first of `num_tokens` tokens (rows of `hidden` bf16 values) whose bytes differ between a
// and b, or -1 when all are bitwise equal.
inline int first_differing_token(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                                 int num_tokens, int hidden) {
  const size_t he = static_cast<size_t>(hidden);
  for (int t = 0; t < num_tokens; ++t) {
    if (std::memcmp(a.data() + t * he, b.data() + t * he, he * 2) != 0) return t;
  }
  return -1;
}

// Skewed routing: low expert ids (rank 0's home experts) are hot; k distinct experts per token;
// weights in [0.05, 1]. A few choices are -1 (no expert) to exercise empty routes.
inline void make_routes(int num_tokens, int top_k, int num_experts, std::vector<int32_t>& ids,
                        std::vector<float>& weights) {
  uint64_t state = 12345;
  const auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  ids.assign(static_cast<size_t>(num_tokens) * top_k, -1);
  weights.assign(ids.size(), 0.0f);
  for (int t = 0; t < num_tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      int e = 0;
      bool repeat = true;
      while (repeat) {
        const double u = next();
        e = static_cast<int>(num_experts * u * u * u);
        repeat = false;
        for (int i = 0; i < j; ++i) repeat = repeat || ids[t * top_k + i] == e;
      }
      ids[t * top_k + j] = (t % 97 == 5 && j == top_k - 1) ? -1 : e;
      weights[t * top_k + j] = static_cast<float>(0.05 + 0.95 * next());
    }
  }
}

}  // namespace iser::moe::testing
