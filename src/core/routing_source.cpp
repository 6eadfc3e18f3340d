#include "iser/trace.h"

namespace iser {

CountMatrix RoutingSource::counts(int layer_idx, int64_t iteration_idx, int num_ranks,
                                  int tokens_per_rank) const {
  const auto ids = tokens(layer_idx, iteration_idx, num_ranks, tokens_per_rank);
  return CountMatrix::from_topk(ids, num_ranks, tokens_per_rank, metadata().top_k,
                                metadata().num_experts);
}

}  // namespace iser
