// Error reporting usable from .cu files. nvcc (CUDA 13, C++20) cannot compile fmt 9's headers,
// so CUDA sources never include iser/error.h; they report through these out-of-line helpers
// (defined in launch_check.cpp, compiled by the host compiler), which throw iser::Error.
//
// The CUDA layer's convention: a launch helper (`void launch_*(params, stream)`) validates what
// only it knows (check_range), launches, then ISER_CHECK_LAUNCH; every error leaves it as an
// iser::Error, so callers never check a return code.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

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

// Device-side invariant (a precondition the host already guarantees, checked where breaking it
// would otherwise fault obscurely or corrupt memory): prints the condition and its place, then
// traps the kernel; the host's next CUDA call on that context fails (cudaErrorLaunchFailure),
// which ISER_CUDA_CHECK / check_cuda turn into iser::Error. Like assert(), compiled out under
// NDEBUG unless ISER_DEVICE_ASSERTS is defined (the checks sit on copy paths).
#if !defined(NDEBUG) || defined(ISER_DEVICE_ASSERTS)
#define ISER_DEVICE_ASSERT(cond)                                                        \
  do {                                                                                  \
    if (!(cond)) [[unlikely]] {                                                         \
      printf("iser device assertion failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      __trap();                                                                         \
    }                                                                                   \
  } while (0)
#else
#define ISER_DEVICE_ASSERT(cond) \
  do {                           \
    (void)sizeof(cond);          \
  } while (0)
#endif
