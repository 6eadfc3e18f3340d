// The device check behind tail algorithms (src/moe/lt_gemm.h): it accepts the pinned algorithm
// against itself at other row counts (the property the ON/OFF guarantee rests on) and rejects
// an algorithm that sums K in another order (split-K), so a passing check means something.
#include <cublasLt.h>

#include <array>
#include <vector>

#include <gtest/gtest.h>

#include "moe/cublas_check.h"
#include "moe/lt_gemm.h"
#include "moe_test_util.h"

namespace iser::moe {
namespace {

constexpr size_t kWorkspace = size_t{32} << 20;

int32_t split_k_of(const cublasLtMatmulAlgo_t& algo) {
  int32_t splits = 0;
  size_t written = 0;
  return cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                              sizeof(splits), &written) == CUBLAS_STATUS_SUCCESS
             ? splits
             : 0;
}

class LtHandle {
 public:
  LtHandle() { ISER_CUBLAS_CHECK(cublasLtCreate(&handle_)); }
  ~LtHandle() { cublasLtDestroy(handle_); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

TEST(LtGemm, PinnedAlgorithmMatchesItselfAtEveryRowCount) {
  if (!testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
  LtHandle lt;
  // GEMM 1 of the default expert shape: M = 2I = 6144, K = He = 7168.
  PinnedLtGemm gemm(lt.get(), 6144, 7168, 1024, 8192, kWorkspace);
  const std::array<int, 6> ns = {1, 7, 64, 129, 255, 700};
  EXPECT_TRUE(gemm.matches_pinned(gemm.pinned().algo, ns, kWorkspace)) << gemm.description();
}

TEST(LtGemm, CheckRejectsASplitKAlgorithm) {
  if (!testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
  LtHandle lt;
  PinnedLtGemm gemm(lt.get(), 6144, 7168, 1024, 8192, kWorkspace);
  // The heuristic proposes split-K for few rows and a long K; any such proposal adds partial
  // sums over K ranges, a different order from the pinned kernel's single pass.
  for (const int n : {16, 32, 64, 8}) {
    for (const cublasLtMatmulAlgo_t& algo : gemm.proposals(n, kWorkspace)) {
      if (split_k_of(algo) <= 1) continue;
      const std::array<int, 1> at = {n};
      EXPECT_FALSE(gemm.matches_pinned(algo, at, kWorkspace))
          << "a split-K algorithm (" << split_k_of(algo) << " splits) at n = " << n
          << " gave the pinned bytes";
      return;
    }
  }
  GTEST_SKIP() << "the heuristic proposed no split-K algorithm on this device";
}

}  // namespace
}  // namespace iser::moe
