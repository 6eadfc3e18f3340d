// One GEMM shape family D[M, n] = A^T-view[M, K] · B[K, n] (column-major, bf16 in/out, fp32
// accumulate) with a cublasLt algorithm pinned at construction: no split-K, checked valid for
// every n in [1, max_n]. Pinning the kernel makes each output element's accumulation order a
// function of (M, K) alone, so a token's row gives the same bytes whatever n or its position.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace iser::moe {

class PinnedLtGemm {
 public:
  // m, k: fixed; reference_n: the n the algorithm is tuned for; max_n: the largest n run.
  PinnedLtGemm(cublasLtHandle_t lt, int m, int k, int reference_n, int64_t max_n,
               size_t workspace_bytes);
  ~PinnedLtGemm();
  PinnedLtGemm(const PinnedLtGemm&) = delete;
  PinnedLtGemm& operator=(const PinnedLtGemm&) = delete;

  // a: [M rows of K] row-major weights (lda = K); b: n rows of K; d: n rows of M.
  void run(const void* a, const void* b, void* d, int64_t n, void* workspace,
           size_t workspace_bytes, cudaStream_t stream);
  // "tile/stages/cluster" of the pinned algorithm (benchmark headers).
  const std::string& description() const { return description_; }

 private:
  void pin(int reference_n, int64_t max_n, size_t workspace_bytes);
  void release() noexcept;
  void set_n(int64_t n);

  cublasLtHandle_t lt_ = nullptr;
  int m_ = 0;
  int k_ = 0;
  int64_t current_n_ = -1;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  std::string description_;
};

}  // namespace iser::moe
