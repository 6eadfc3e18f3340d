// One GEMM shape family D[M, n] = A^T-view[M, K] · B[K, n] (column-major, bf16 in/out, fp32
// accumulate) with a cublasLt algorithm pinned at construction: no split-K, checked valid for
// every n in [1, max_n]. Pinning the kernel makes each output element's accumulation order a
// function of (M, K) alone, so a token's row gives the same bytes whatever n or its position.
//
// Tail algorithms. A launch pads n up to its algorithm's row granule (tile n x cluster n; 256
// for the pinned H200 kernels of the default expert shape), so a call of 300 rows computes 512.
// With tail algorithms enabled, a call runs its whole granules on the pinned algorithm and its
// last rows on the tail algorithm of the smallest granule that holds them (e.g. the same kernel
// without the 2-CTA cluster, or a 64 x 32 tile). Each tail algorithm is admitted only after a
// device check at construction: for every row count it can be given (1 .. granule - 1 of the pinned
// algorithm), its output bytes equal the pinned algorithm's on pseudo-random data. NOTE: a GEMM
// kernel's accumulation order does not depend on the values, so equal bytes on random data (any
// different order flips low bits of some of the ~10^6 outputs) means equal order, and the
// token-output guarantee above carries over to the mixed call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "moe/lt_pieces.h"

namespace iser::moe {

// m x n of a cublasLt tile or cluster shape id; {0, 0} where the id is unknown.
struct LtShape {
  int m = 0;
  int n = 0;
};
LtShape lt_tile_shape(uint32_t tile_id);
LtShape lt_cluster_shape(uint32_t cluster_id);

// One algorithm configuration and the row granule its launches pad n to (0: unknown).
struct LtAlgo {
  cublasLtMatmulAlgo_t algo{};
  int granule = 0;
  std::string description;
};

class PinnedLtGemm {
 public:
  // m, k: fixed; reference_n: the n the algorithm is tuned for; max_n: the largest n run.
  // min_tail_granule: 0 disables tail algorithms; otherwise verified algorithms with granules
  // in [min_tail_granule, pinned granule) run the last rows of each call.
  PinnedLtGemm(cublasLtHandle_t lt, int m, int k, int reference_n, int64_t max_n,
               size_t workspace_bytes, int min_tail_granule = 0);
  ~PinnedLtGemm();
  PinnedLtGemm(const PinnedLtGemm&) = delete;
  PinnedLtGemm& operator=(const PinnedLtGemm&) = delete;

  // a: [M rows of K] row-major weights (lda = K); b: n rows of K; d: n rows of M.
  void run(const void* a, const void* b, void* d, int64_t n, void* workspace,
           size_t workspace_bytes, cudaStream_t stream);
  // The pinned algorithm and the tail algorithms in use (benchmark headers).
  std::string description() const;
  const LtAlgo& pinned() const { return pinned_; }
  const std::vector<LtAlgo>& tails() const { return tails_; }
  // Rows the launches of an n-row call compute (n rounded up per piece), for reports.
  int64_t padded_rows(int64_t n) const;

  // Device check: whether `candidate` writes the pinned algorithm's bytes at every row count of
  // `ns` (each >= 1) on pseudo-random data. Synchronises the device.
  bool matches_pinned(const cublasLtMatmulAlgo_t& candidate, std::span<const int> ns,
                      size_t workspace_bytes);
  // The heuristic's proposals at n (successful states only).
  std::vector<cublasLtMatmulAlgo_t> proposals(int64_t n, size_t workspace_bytes);

  // Calls f(algo, first_row, rows) for the pieces of an n-row call (split_rows): the whole
  // pinned granules, then at most one launch for the rest. Deterministic in n.
  template <typename F>
  void for_each_piece(int64_t n, F&& f) const;

 private:
  void pin(int reference_n, int64_t max_n, size_t workspace_bytes);
  void pin_tails(int min_tail_granule, size_t workspace_bytes);
  void verify_tails(const std::vector<LtAlgo>& candidates, size_t workspace_bytes);
  // Heuristic candidates at n (alignment of any row offset, workspace bound); returns the count.
  int heuristics(int64_t n, size_t workspace_bytes,
                 std::span<cublasLtMatmulHeuristicResult_t> results);
  void release() noexcept;
  void set_n(int64_t n);
  bool valid_at(const cublasLtMatmulAlgo_t& algo, std::initializer_list<int64_t> ns,
                size_t workspace_bytes);
  cublasStatus_t try_launch(const cublasLtMatmulAlgo_t& algo, const void* a, const void* b, void* d,
                            int64_t n, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);
  void launch(const LtAlgo& algo, const void* a, const void* b, void* d, int64_t n, void* workspace,
              size_t workspace_bytes, cudaStream_t stream);

  cublasLtHandle_t lt_ = nullptr;
  int m_ = 0;
  int k_ = 0;
  int64_t current_n_ = -1;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  LtAlgo pinned_;
  std::vector<LtAlgo> tails_;       // verified; granules strictly decreasing, below pinned_.granule
  std::vector<int> tail_granules_;  // tails_[i].granule
  int rejected_tails_ = 0;          // candidates that failed the bitwise check
};

template <typename F>
void PinnedLtGemm::for_each_piece(int64_t n, F&& f) const {
  LtPiece pieces[2];
  const int count = split_rows(n, pinned_.granule, tail_granules_, pieces);
  for (int i = 0; i < count; ++i) {
    f(pieces[i].tail < 0 ? pinned_ : tails_[pieces[i].tail], pieces[i].first_row, pieces[i].rows);
  }
}

}  // namespace iser::moe
