// The project's one owner of plain device memory (RAII, move-only): every layer from the kernels'
// launch units up allocates its device buffers through it. The runtime's symmetric region is the
// exception: it is exported to peers (IPC handles or NCCL windows), so the runtime owns it itself.
// Usable from .cpp and .cu sources alike (errors through check_cuda, not iser/error.h).
#pragma once

#include <cstddef>
#include <utility>

#include <cuda_runtime.h>

#include "cuda/launch_check.h"

namespace iser::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) check_cuda(cudaMalloc(&ptr_, bytes_), "cudaMalloc of a device buffer");
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace iser::cuda
