// Helpers shared by the planner tests.
#pragma once

#include <fmt/format.h>

#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/planner/synthetic_counts.h"
#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/rewrite.h"
#include "iser/topology.h"

namespace iser::test_util {

// topk_ids [P * tokens_per_rank, top_k] with skewed, distinct experts per token and some -1.
inline std::vector<int32_t> random_tokens(const Topology& topo, int tokens_per_rank, int top_k,
                                          uint64_t seed) {
  testing::SplitMix64 rng(seed);
  const int E = topo.num_experts;
  const int k = std::min(top_k, E);
  std::vector<int32_t> ids(static_cast<size_t>(topo.num_ranks) * tokens_per_rank * top_k, -1);
  for (size_t t = 0; t < ids.size() / top_k; ++t) {
    for (int j = 0; j < k; ++j) {
      if (rng.below(16) == 0) continue;  // an empty choice
      int e = 0;
      bool repeat = true;
      while (repeat) {
        // Skew: half the draws hit the first quarter of the experts (a few hot owners).
        e = rng.below(2) == 0 ? static_cast<int>(rng.below(std::max(1, E / 4)))
                              : static_cast<int>(rng.below(E));
        repeat = false;
        for (int i = 0; i < j; ++i) repeat |= ids[t * top_k + i] == e;
      }
      ids[t * top_k + j] = e;
    }
  }
  return ids;
}

// Rewrites every rank's tokens and checks that (source, expert, destination) totals equal the
// flow rewrite, that each slot lies on its destination rank, and that it holds the expert.
// Returns an empty string when all holds, else the first mismatch.
inline std::string tokens_vs_flows_mismatch(const Topology& topo, const CountMatrix& counts,
                                            const Plan& plan, std::span<const int32_t> tokens,
                                            int tokens_per_rank, int top_k) {
  std::map<std::tuple<int, int, int>, int64_t> from_flows;
  for (const RouteFlow& f : rewrite_flows(topo, counts, plan)) {
    from_flows[{f.src_rank, f.expert, f.dst_rank}] += f.routes;
  }
  std::map<std::tuple<int, int, int>, int64_t> from_tokens;
  const size_t per_rank = static_cast<size_t>(tokens_per_rank) * top_k;
  const int slots = topo.slots_per_rank();
  const int H = topo.experts_per_rank();
  for (int s = 0; s < topo.num_ranks; ++s) {
    const auto ids = tokens.subspan(s * per_rank, per_rank);
    std::vector<int32_t> out(per_rank, -2);
    rewrite_tokens(topo, counts, plan, s, ids, top_k, out);
    for (size_t i = 0; i < per_rank; ++i) {
      if (ids[i] == -1) {
        if (out[i] != -1)
          return fmt::format("rank {} route {}: empty choice got slot {}", s, i, out[i]);
        continue;
      }
      if (out[i] < 0) return fmt::format("rank {} route {}: no slot", s, i);
      const int dst = out[i] / slots;
      const int local = out[i] % slots;
      if (local < H) {
        if (out[i] != topo.home_slot(ids[i])) {
          return fmt::format("rank {} route {}: slot {} is not the home slot of expert {}", s, i,
                             out[i], ids[i]);
        }
      } else {
        bool holds = false;
        for (const Broadcast& b : plan.broadcasts) {
          holds |= b.expert == ids[i] && b.in_group(dst) && H + b.helper == local;
        }
        if (!holds) return fmt::format("slot {} does not hold expert {}", out[i], ids[i]);
      }
      ++from_tokens[{s, ids[i], dst}];
    }
  }
  if (from_tokens != from_flows) return "token rewrite totals differ from the flow rewrite";
  return {};
}

}  // namespace iser::test_util
