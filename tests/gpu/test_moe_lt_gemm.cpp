// The device check behind tail algorithms (src/moe/lt_gemm.h): it accepts the pinned algorithm
// against itself at other row counts (the property the ON/OFF guarantee rests on) and rejects
// an algorithm that sums K in another order (split-K), so a passing check means something.
#include <cublasLt.h>

#include <array>
#include <vector>

#include <gtest/gtest.h>

#include "moe/cublas_check.h"
#include "moe/lt_gemm.h"
#include "moe/lt_pieces.h"
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
  ISER_REQUIRE_GPUS(1);
  LtHandle lt;
  // GEMM 1 of the default expert shape: M = 2I = 6144, K = He = 7168.
  PinnedLtGemm gemm(lt.get(), 6144, 7168, 1024, 8192, kWorkspace);
  const std::array<int, 6> ns = {1, 7, 64, 129, 255, 700};
  EXPECT_TRUE(gemm.matches_pinned(gemm.pinned().algo, ns, kWorkspace)) << gemm.description();
}

TEST(LtGemm, CheckRejectsASplitKAlgorithm) {
  ISER_REQUIRE_GPUS(1);
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

// Host arithmetic only (runs without a GPU): the pieces cover [0, n) in order, whole granules
// stay on the pinned algorithm, and the rest goes to the smallest tail that holds it.
TEST(LtGemm, SplitRowsPutsWholeGranulesOnThePinnedAlgorithm) {
  const std::vector<std::vector<int>> tail_sets = {{}, {128}, {160, 128, 64, 32, 16}, {128, 64, 8}};
  for (const std::vector<int>& tails : tail_sets) {
    for (int64_t n = 0; n <= 2100; ++n) {
      LtPiece pieces[2];
      const int count = split_rows(n, 256, tails, pieces);
      ASSERT_EQ(count == 0, n == 0);
      int64_t row = 0;
      for (int i = 0; i < count; ++i) {
        ASSERT_EQ(pieces[i].first_row, row) << "n " << n;
        ASSERT_GT(pieces[i].rows, 0) << "n " << n;
        row += pieces[i].rows;
      }
      ASSERT_EQ(row, n);
      const int64_t left = n % 256;
      int want = -1;  // the smallest tail granule >= left
      for (int i = 0; i < static_cast<int>(tails.size()); ++i) {
        if (left > 0 && tails[i] >= left) want = i;
      }
      if (count == 0) continue;
      if (want < 0) {
        ASSERT_EQ(count, 1) << "n " << n;
        EXPECT_EQ(pieces[0].tail, -1);
        continue;
      }
      ASSERT_EQ(pieces[count - 1].tail, want) << "n " << n;
      ASSERT_EQ(pieces[count - 1].rows, left) << "n " << n;
      if (count == 2) {
        EXPECT_EQ(pieces[0].tail, -1);
        EXPECT_EQ(pieces[0].rows % 256, 0) << "n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace iser::moe
