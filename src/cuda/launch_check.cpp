#include "cuda/launch_check.h"

#include "iser/error.h"

namespace iser::cuda {

void check_cuda(cudaError_t status, const char* what) {
  ISER_CHECK(status == cudaSuccess, "CUDA error {} ({}) in {}", cudaGetErrorName(status),
             cudaGetErrorString(status), what);
}

void check_range(long long value, long long lo, long long hi, const char* what) {
  ISER_CHECK(value >= lo && value <= hi, "{}: {} outside [{}, {}]", what, value, lo, hi);
}

}  // namespace iser::cuda
