// Count matrices (docs/design.md §3): c[s][e] = routes (token-expert pairs) that source rank s
// sends to expert e in one layer invocation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "iser/topology.h"

namespace iser {

class CountMatrix {
 public:
  CountMatrix() = default;
  CountMatrix(int num_ranks, int num_experts);

  int num_ranks() const { return num_ranks_; }
  int num_experts() const { return num_experts_; }

  int32_t& at(int src_rank, int expert_idx) { return data_[index(src_rank, expert_idx)]; }
  int32_t at(int src_rank, int expert_idx) const { return data_[index(src_rank, expert_idx)]; }
  std::span<int32_t> row(int src_rank) { return {data_.data() + index(src_rank, 0), size_e()}; }
  std::span<const int32_t> row(int src_rank) const {
    return {data_.data() + index(src_rank, 0), size_e()};
  }
  std::span<const int32_t> data() const { return data_; }
  std::span<int32_t> data() { return data_; }

  std::vector<int64_t> histogram() const;                       // hist[e] = sum_s c[s][e]
  std::vector<int64_t> home_loads(const Topology& topo) const;  // L[r] without balancing
  int64_t total() const;

  // Rank r's tokens are rows [r*tokens_per_rank, (r+1)*tokens_per_rank) of topk_ids
  // ([num_ranks*tokens_per_rank, top_k], row-major). Id -1 means "no expert" and is skipped; any
  // other id outside [0, num_experts) throws iser::Error naming the token and value.
  static CountMatrix from_topk(std::span<const int32_t> topk_ids, int num_ranks,
                               int tokens_per_rank, int top_k, int num_experts);

  friend bool operator==(const CountMatrix&, const CountMatrix&) = default;

 private:
  size_t index(int src_rank, int expert_idx) const {
    return static_cast<size_t>(src_rank) * static_cast<size_t>(num_experts_) +
           static_cast<size_t>(expert_idx);
  }
  size_t size_e() const { return static_cast<size_t>(num_experts_); }

  int num_ranks_ = 0;
  int num_experts_ = 0;
  std::vector<int32_t> data_;
};

}  // namespace iser
