// Error reporting usable from .cu files. nvcc (CUDA 13, C++20) cannot compile fmt 9's headers,
// so CUDA sources never include iser/error.h; they report through these out-of-line helpers
// (defined in launch_check.cpp, compiled by the host compiler), which throw iser::Error.
#pragma once

#include <cuda_runtime.h>

namespace iser::cuda {

// Throws iser::Error naming `what` when `status` is not cudaSuccess.
void check_cuda(cudaError_t status, const char* what);
// Throws iser::Error("<what>: <value> outside [lo, hi]") unless lo <= value <= hi.
void check_range(long long value, long long lo, long long hi, const char* what);

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) on the
// current device, but never lowering what an earlier call set: the attribute belongs to the
// kernel, not to the object that sets it, so two planners of different shapes in one process
// would otherwise leave the larger one's launches beyond the limit (cudaErrorInvalidValue).
cudaError_t raise_dynamic_smem_limit(const void* kernel, int bytes);

}  // namespace iser::cuda

// After a kernel launch: reports launch-configuration errors (asynchronous faults surface later).
#define ISER_CHECK_LAUNCH(name) ::iser::cuda::check_cuda(cudaGetLastError(), "launch of " name)
