// Set-up collectives over the runtime's NCCL communicator (synchronous, set-up only).
#pragma once

#include <type_traits>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda/device_buffer.h"
#include "iser/error.h"

namespace iser::runtime {

// All-gather of a trivially copyable value over NCCL: element r of the result is rank r's.
template <typename T>
std::vector<T> all_gather(ncclComm* comm, const T& mine, int num_ranks) {
  static_assert(std::is_trivially_copyable_v<T>);
  const cuda::DeviceBuffer buffer(sizeof(T) * (num_ranks + 1));
  char* device = buffer.get<char>();
  std::vector<T> all(num_ranks);
  cudaStream_t stream = nullptr;
  try {
    ISER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // On `stream`: a cudaMemcpy (default stream) may return before its DMA lands, and nothing
    // would order the non-blocking stream's all-gather after it.
    ISER_CUDA_CHECK(cudaMemcpyAsync(device, &mine, sizeof(T), cudaMemcpyHostToDevice, stream));
    ISER_NCCL_CHECK(ncclAllGather(device, device + sizeof(T), sizeof(T), ncclChar, comm, stream));
    ISER_CUDA_CHECK(cudaStreamSynchronize(stream));
    ISER_CUDA_CHECK(
        cudaMemcpy(all.data(), device + sizeof(T), sizeof(T) * num_ranks, cudaMemcpyDeviceToHost));
  } catch (...) {
    if (stream) cudaStreamDestroy(stream);
    throw;
  }
  cudaStreamDestroy(stream);
  return all;
}

}  // namespace iser::runtime
