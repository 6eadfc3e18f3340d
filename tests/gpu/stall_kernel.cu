// A kernel that holds a stream until the host releases it (fault injection for the READY tests).
#include <cstdint>

#include <cuda_runtime.h>

namespace iser::testing {
namespace {

__global__ void stall_kernel(const volatile int* flag, uint64_t timeout_ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    if (*flag != 0) return;
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) return;
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t launch_stall(const volatile int* device_flag, uint64_t timeout_ns,
                         cudaStream_t stream) {
  stall_kernel<<<1, 1, 0, stream>>>(device_flag, timeout_ns);
  return cudaGetLastError();
}

cudaError_t preload_stall_kernel() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&stall_kernel));
}

}  // namespace iser::testing
