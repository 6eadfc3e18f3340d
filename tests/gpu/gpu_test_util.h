// The one way a GPU test checks for its devices: ISER_REQUIRE_GPUS(n) skips the test where fewer
// than n CUDA devices exist (ctest label `gpu`: these tests skip themselves on CPU-only machines).
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

namespace iser::testing {

inline int num_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace iser::testing

#define ISER_REQUIRE_GPUS(n)                                                             \
  do {                                                                                   \
    if (::iser::testing::num_gpus() < (n)) GTEST_SKIP() << "needs " << (n) << " GPU(s)"; \
  } while (0)
