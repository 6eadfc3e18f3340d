#include "moe/lt_gemm.h"

#include <array>
#include <vector>

#include "iser/error.h"
#include "moe/cublas_check.h"

namespace iser::moe {
namespace {

// -1 where the attribute cannot be read.
template <typename T>
long long algo_attr_or(const cublasLtMatmulAlgo_t& algo,
                       cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  return cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) ==
                 CUBLAS_STATUS_SUCCESS
             ? static_cast<long long>(value)
             : -1;
}

}  // namespace

PinnedLtGemm::PinnedLtGemm(cublasLtHandle_t lt, int m, int k, int reference_n, int64_t max_n,
                           size_t workspace_bytes)
    : lt_(lt), m_(m), k_(k) {
  try {
    pin(reference_n, max_n, workspace_bytes);
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void PinnedLtGemm::pin(int reference_n, int64_t max_n, size_t workspace_bytes) {
  const int m = m_, k = k_;
  ISER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  ISER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                   sizeof(trans_a)));
  ISER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                   sizeof(trans_b)));
  ISER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, k, m, k));
  ISER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, k, reference_n, k));
  ISER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, CUDA_R_16BF, m, reference_n, m));
  current_n_ = reference_n;

  cublasLtMatmulPreference_t pref = nullptr;
  ISER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  ISER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes)));
  std::array<cublasLtMatmulHeuristicResult_t, 16> results{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      lt_, desc_, a_, b_, d_, d_, pref, static_cast<int>(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  ISER_CUBLAS_CHECK(status);

  // The first heuristic candidate that runs without split-K at every n we will use.
  const std::array<int64_t, 3> check_n = {1, reference_n, max_n};
  bool pinned = false;
  for (int i = 0; i < found && !pinned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    cublasLtMatmulAlgo_t algo = results[i].algo;
    // Split-K sums partial products in an order that depends on n; such candidates are skipped
    // (not reconfigured: not every kernel accepts a changed configuration).
    if (algo_attr_or<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) continue;
    bool valid = true;
    for (int64_t n : check_n) {
      set_n(n);
      cublasLtMatmulHeuristicResult_t check{};
      valid = valid &&
              cublasLtMatmulAlgoCheck(lt_, desc_, a_, b_, d_, d_, &algo, &check) ==
                  CUBLAS_STATUS_SUCCESS &&
              check.workspaceSize <= workspace_bytes;
    }
    if (!valid) continue;
    algo_ = algo;
    pinned = true;
    description_ = fmt::format("algo {} tile {} stages {} cluster {} swizzle {} custom {}",
                               algo_attr_or<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                               algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                               algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                               algo_attr_or<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                               algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                               algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  }
  ISER_CHECK(pinned, "cublasLt: no split-K-free algorithm valid for {}x{}x[1, {}] ({} candidates)",
             m, k, max_n, found);
}

PinnedLtGemm::~PinnedLtGemm() {
  release();
}

void PinnedLtGemm::release() noexcept {
  if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
  if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
  if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

void PinnedLtGemm::set_n(int64_t n) {
  if (n == current_n_) return;
  const uint64_t cols = static_cast<uint64_t>(n);
  ISER_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(b_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  ISER_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(d_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  current_n_ = n;
}

void PinnedLtGemm::run(const void* a, const void* b, void* d, int64_t n, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream) {
  set_n(n);
  const float alpha = 1.0f, beta = 0.0f;
  ISER_CUBLAS_CHECK(cublasLtMatmul(lt_, desc_, &alpha, a, a_, b, b_, &beta, d, d_, d, d_, &algo_,
                                   workspace, workspace_bytes, stream));
}

}  // namespace iser::moe
