#include "iser/counts.h"

#include <numeric>

#include "iser/error.h"

namespace iser {

CountMatrix::CountMatrix(int num_ranks, int num_experts)
    : num_ranks_(num_ranks),
      num_experts_(num_experts),
      data_(static_cast<size_t>(num_ranks) * static_cast<size_t>(num_experts), 0) {
  ISER_CHECK(num_ranks >= 0 && num_experts >= 0, "invalid count matrix shape {} x {}", num_ranks,
             num_experts);
}

std::vector<int64_t> CountMatrix::histogram() const {
  std::vector<int64_t> hist(size_e(), 0);
  for (int s = 0; s < num_ranks_; ++s) {
    const auto r = row(s);
    for (int e = 0; e < num_experts_; ++e) hist[e] += r[e];
  }
  return hist;
}

std::vector<int64_t> CountMatrix::home_loads(const Topology& topo) const {
  ISER_CHECK(topo.num_ranks == num_ranks_ && topo.num_experts == num_experts_,
             "count matrix {} x {} does not match topology P = {}, E = {}", num_ranks_,
             num_experts_, topo.num_ranks, topo.num_experts);
  const auto hist = histogram();
  std::vector<int64_t> loads(static_cast<size_t>(num_ranks_), 0);
  for (int e = 0; e < num_experts_; ++e) loads[topo.owner_of(e)] += hist[e];
  return loads;
}

int64_t CountMatrix::total() const {
  return std::accumulate(data_.begin(), data_.end(), int64_t{0});
}

CountMatrix CountMatrix::from_topk(std::span<const int32_t> topk_ids, int num_ranks,
                                   int tokens_per_rank, int top_k, int num_experts) {
  ISER_CHECK(top_k > 0, "invalid top_k = {}", top_k);
  ISER_CHECK(tokens_per_rank >= 0, "invalid tokens per rank = {}", tokens_per_rank);
  const size_t expected =
      static_cast<size_t>(num_ranks) * static_cast<size_t>(tokens_per_rank) * top_k;
  ISER_CHECK(topk_ids.size() == expected,
             "topk_ids has {} entries, expected P*tau*k = {}*{}*{} = {}", topk_ids.size(),
             num_ranks, tokens_per_rank, top_k, expected);
  CountMatrix counts(num_ranks, num_experts);
  const size_t per_rank = static_cast<size_t>(tokens_per_rank) * top_k;
  for (int s = 0; s < num_ranks; ++s) {
    auto r = counts.row(s);
    const int32_t* ids = topk_ids.data() + s * per_rank;
    for (size_t i = 0; i < per_rank; ++i) {
      const int32_t e = ids[i];
      if (e == -1) continue;
      ISER_CHECK(e >= 0 && e < num_experts,
                 "expert id {} out of range [0, {}) at rank {} token {} choice {}", e, num_experts,
                 s, i / top_k, i % top_k);
      ++r[e];
    }
  }
  return counts;
}

}  // namespace iser
