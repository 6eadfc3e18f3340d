// One error vocabulary for the whole project: host checks throw iser::Error with a message that
// names what was wrong (file, field, value); CUDA/NCCL checks add the call site. CUDA sources
// cannot include this header (nvcc cannot compile fmt's): they report through
// src/cuda/launch_check.h, which also holds ISER_DEVICE_ASSERT for device-side invariants.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace iser {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace iser

// ISER_CHECK(cond, "fmt {}", args...): throws iser::Error with the formatted message.
#define ISER_CHECK(cond, ...)                          \
  do {                                                 \
    if (!(cond)) [[unlikely]] {                        \
      throw ::iser::Error(::fmt::format(__VA_ARGS__)); \
    }                                                  \
  } while (0)

// Usable wherever <cuda_runtime.h> / <nccl.h> is included; macros expand lazily.
#define ISER_CUDA_CHECK(expr)                                                             \
  do {                                                                                    \
    const cudaError_t iser_err_ = (expr);                                                 \
    if (iser_err_ != cudaSuccess) [[unlikely]] {                                          \
      throw ::iser::Error(                                                                \
          ::fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(iser_err_), \
                        cudaGetErrorString(iser_err_), #expr, __FILE__, __LINE__));       \
    }                                                                                     \
  } while (0)

#define ISER_CU_CHECK(expr)                                                             \
  do {                                                                                  \
    const CUresult iser_res_ = (expr);                                                  \
    if (iser_res_ != CUDA_SUCCESS) [[unlikely]] {                                       \
      const char* iser_name_ = nullptr;                                                 \
      cuGetErrorName(iser_res_, &iser_name_);                                           \
      throw ::iser::Error(::fmt::format("CUDA driver error {} in {} at {}:{}",          \
                                        iser_name_ ? iser_name_ : "?", #expr, __FILE__, \
                                        __LINE__));                                     \
    }                                                                                   \
  } while (0)

#define ISER_NCCL_CHECK(expr)                                                            \
  do {                                                                                   \
    const ncclResult_t iser_nres_ = (expr);                                              \
    if (iser_nres_ != ncclSuccess) [[unlikely]] {                                        \
      throw ::iser::Error(::fmt::format("NCCL error {} in {} at {}:{}",                  \
                                        ncclGetErrorString(iser_nres_), #expr, __FILE__, \
                                        __LINE__));                                      \
    }                                                                                    \
  } while (0)
