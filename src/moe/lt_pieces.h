// How a call of n rows is split between a pinned cublasLt algorithm and its tail algorithms
// (src/moe/lt_gemm.h): pure host arithmetic, apart so that it can be tested without a GPU.
#pragma once

#include <cstdint>
#include <span>

namespace iser::moe {

struct LtPiece {
  int tail = -1;  // -1: the pinned algorithm; else an index into the tail granules
  int64_t first_row = 0;
  int64_t rows = 0;
};

// Writes the pieces of an n-row call into out[0..return) in row order: the whole pinned
// granules, then the rest on the tail of the smallest granule that holds it in one column of
// tiles (every column of a launch streams the whole weight matrix, so two columns of a smaller
// tile cost more than one of a larger). No tail holds the rest (or there are no tails): one
// pinned piece of all n rows. tail_granules: decreasing, each below pinned_granule.
inline int split_rows(int64_t n, int pinned_granule, std::span<const int> tail_granules,
                      LtPiece (&out)[2]) {
  if (n <= 0) return 0;
  const int64_t left = tail_granules.empty() ? 0 : n % pinned_granule;
  int best = -1;
  for (int i = 0; i < static_cast<int>(tail_granules.size()); ++i) {
    if (left > 0 && tail_granules[i] >= left) best = i;
  }
  if (best < 0) {
    out[0] = {-1, 0, n};
    return 1;
  }
  int count = 0;
  if (n > left) out[count++] = {-1, 0, n - left};
  out[count++] = {best, n - left, left};
  return count;
}

}  // namespace iser::moe
