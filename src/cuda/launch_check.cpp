#include "cuda/launch_check.h"

#include <map>
#include <mutex>
#include <utility>

#include "iser/error.h"

namespace iser::cuda {

void check_cuda(cudaError_t status, const char* what) {
  ISER_CHECK(status == cudaSuccess, "CUDA error {} ({}) in {}", cudaGetErrorName(status),
             cudaGetErrorString(status), what);
}

void check_range(long long value, long long lo, long long hi, const char* what) {
  ISER_CHECK(value >= lo && value <= hi, "{}: {} outside [{}, {}]", what, value, lo, hi);
}

cudaError_t raise_dynamic_smem_limit(const void* kernel, int bytes) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> limits;  // (kernel, device) -> bytes set
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(mutex);
  int& limit = limits[{kernel, device}];
  if (bytes <= limit) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) limit = bytes;
  return e;
}

}  // namespace iser::cuda
