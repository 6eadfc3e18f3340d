// cuBLAS status check for the reference MoE layer (host code only).
#pragma once

#include <cublas_api.h>

#include "iser/error.h"

#define ISER_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                    \
    const cublasStatus_t iser_cb_ = (expr);                                               \
    if (iser_cb_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                 \
      throw ::iser::Error(::fmt::format("cuBLAS error {} in {} at {}:{}",                 \
                                        cublasGetStatusString(iser_cb_), #expr, __FILE__, \
                                        __LINE__));                                       \
    }                                                                                     \
  } while (0)
