// Route rewrite (docs/design.md §4.5): local first, north-west corner.
//
// Generic over plans with quotas: HALO-Q family (aligned groups), point-to-point plans (group of
// one rank, level kUnalignedLevel) and experts broadcast more than once. Decisions (docs/design.md
// §4.5):
//  - Several broadcasts of one expert combine: the rank's quota is the sum of its quotas over
//    those broadcasts, and the north-west corner runs once per expert on the combined quotas.
//  - Slot of a destination d for expert e: the home slot if d is the owner and the plan says
//    owner_uses_home_slot; else the helper slot H + h_b of the first broadcast of e (plan order)
//    whose group contains d; else (the owner outside every group of e) the home slot. A rank
//    that holds e in two slots thus computes all its routes of e in one of them.
//  - Flows are listed by expert, then source rank, then destination rank; a (source,
//    destination) pair appears at most once per expert.
//  - Token ordinals: the k-th route (flattened [token, k] order) of expert e on rank s goes to
//    the destination whose cumulative range in source s's flows, in destination order, holds k.
//    Destination order is exactly "residual d < s, then s itself, then residual d > s", because
//    a rank with residual supply has no residual demand.
#include "iser/rewrite.h"

#include <algorithm>

#include "iser/error.h"

namespace iser {
namespace {

// Broadcasts of each expert, in plan order (CSR), after checking the plan's shape.
struct ExpertIndex {
  std::vector<int32_t> begin;  // [E + 1]
  std::vector<int32_t> list;

  ExpertIndex(const Topology& topo, const CountMatrix& counts, const Plan& plan) {
    const int P = topo.num_ranks;
    const int E = topo.num_experts;
    ISER_CHECK(counts.num_ranks() == P && counts.num_experts() == E,
               "count matrix {} x {} does not match topology P = {}, E = {}", counts.num_ranks(),
               counts.num_experts(), P, E);
    begin.assign(E + 1, 0);
    for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
      const Broadcast& b = plan.broadcasts[i];
      ISER_CHECK(b.expert >= 0 && b.expert < E, "plan broadcast {}: expert {} out of range", i,
                 b.expert);
      ISER_CHECK(static_cast<int>(b.quota.size()) == P,
                 "plan broadcast {}: quota has {} entries, expected P = {}", i, b.quota.size(), P);
      ISER_CHECK(b.group_begin >= 0 && b.group_size >= 0 && b.group_begin + b.group_size <= P,
                 "plan broadcast {}: group [{}, {}) out of range", i, b.group_begin,
                 b.group_begin + b.group_size);
      ++begin[b.expert + 1];
    }
    for (int e = 0; e < E; ++e) begin[e + 1] += begin[e];
    list.resize(plan.broadcasts.size());
    std::vector<int32_t> fill(begin.begin(), begin.end() - 1);
    for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
      list[fill[plan.broadcasts[i].expert]++] = static_cast<int32_t>(i);
    }
  }
  bool has(int e) const { return begin[e + 1] > begin[e]; }
};

// North-west-corner matching of one broadcast expert. Calls emit(src, dst, routes) for every
// positive flow, by source then destination. Needs scratch of 2P.
template <typename Emit>
void match_expert(const Topology& topo, const CountMatrix& counts, const Plan& plan,
                  const ExpertIndex& index, int e, std::vector<int32_t>& supply,
                  std::vector<int32_t>& demand, Emit&& emit) {
  const int P = topo.num_ranks;
  demand.assign(P, 0);
  for (int i = index.begin[e]; i < index.begin[e + 1]; ++i) {
    const Broadcast& b = plan.broadcasts[index.list[i]];
    for (int r = 0; r < P; ++r) demand[r] += b.quota[r];
  }
  int64_t sum_c = 0;
  int64_t sum_q = 0;
  supply.resize(P);
  for (int r = 0; r < P; ++r) {
    ISER_CHECK(demand[r] >= 0, "plan: negative quota {} of expert {} on rank {}", demand[r], e, r);
    const int32_t c = counts.at(r, e);
    const int32_t diag = std::min(c, demand[r]);
    supply[r] = c - diag;
    demand[r] -= diag;
    sum_c += c;
    sum_q += demand[r] + diag;
  }
  ISER_CHECK(sum_c == sum_q, "plan: quotas of expert {} sum to {}, but its routes total {}", e,
             sum_q, sum_c);
  int d = 0;
  for (int s = 0; s < P; ++s) {
    const int32_t diag = counts.at(s, e) - supply[s];
    bool diag_done = diag == 0;
    while (supply[s] > 0) {
      while (demand[d] == 0) ++d;  // sums match, so d < P while supply remains
      if (!diag_done && d > s) {
        emit(s, s, diag);
        diag_done = true;
      }
      const int32_t routes = std::min(supply[s], demand[d]);
      emit(s, d, routes);
      supply[s] -= routes;
      demand[d] -= routes;
    }
    if (!diag_done) emit(s, s, diag);
  }
}

int32_t slot_of(const Topology& topo, const Plan& plan, const ExpertIndex& index, int e, int d) {
  const int owner = topo.owner_of(e);
  if (d == owner && plan.owner_uses_home_slot) return topo.home_slot(e);
  for (int i = index.begin[e]; i < index.begin[e + 1]; ++i) {
    const Broadcast& b = plan.broadcasts[index.list[i]];
    if (b.in_group(d)) return topo.helper_slot(d, b.helper);
  }
  ISER_CHECK(d == owner, "plan: rank {} computes routes of expert {} but hosts no replica", d, e);
  return topo.home_slot(e);
}

}  // namespace

std::vector<RouteFlow> rewrite_flows(const Topology& topo, const CountMatrix& counts,
                                     const Plan& plan) {
  const ExpertIndex index(topo, counts, plan);
  std::vector<RouteFlow> flows;
  // Upper bound: one flow per nonzero count plus, per broadcast expert, at most P − 1 extra
  // residual matches (north-west corner) — reserve the common part.
  flows.reserve(static_cast<size_t>(topo.num_ranks) * topo.num_experts / 2 +
                plan.broadcasts.size() * topo.num_ranks);
  std::vector<int32_t> supply;
  std::vector<int32_t> demand;
  for (int e = 0; e < topo.num_experts; ++e) {
    if (!index.has(e)) {
      const int owner = topo.owner_of(e);
      for (int s = 0; s < topo.num_ranks; ++s) {
        const int32_t c = counts.at(s, e);
        if (c > 0) flows.push_back({s, e, owner, c});
      }
      continue;
    }
    match_expert(topo, counts, plan, index, e, supply, demand, [&](int s, int d, int32_t routes) {
      flows.push_back({s, e, d, routes});
    });
  }
  return flows;
}

void rewrite_tokens(const Topology& topo, const CountMatrix& counts, const Plan& plan, int rank_idx,
                    std::span<const int32_t> topk_ids, int top_k, std::span<int32_t> slot_ids) {
  ISER_CHECK(rank_idx >= 0 && rank_idx < topo.num_ranks, "rank {} out of range [0, {})", rank_idx,
             topo.num_ranks);
  ISER_CHECK(top_k > 0, "invalid top_k = {}", top_k);
  ISER_CHECK(topk_ids.size() % static_cast<size_t>(top_k) == 0,
             "topk_ids has {} entries, not a multiple of top_k = {}", topk_ids.size(), top_k);
  ISER_CHECK(slot_ids.size() == topk_ids.size(), "slot_ids has {} entries, expected {}",
             slot_ids.size(), topk_ids.size());
  const ExpertIndex index(topo, counts, plan);
  const int E = topo.num_experts;

  // Segments of rank s's routes per expert: (end ordinal, slot), in ordinal order.
  struct Segment {
    int32_t end;
    int32_t slot;
  };
  std::vector<int32_t> seg_begin(E + 1, 0);
  std::vector<Segment> segments;
  std::vector<int32_t> supply;
  std::vector<int32_t> demand;
  for (int e = 0; e < E; ++e) {
    seg_begin[e] = static_cast<int32_t>(segments.size());
    const int32_t own = counts.at(rank_idx, e);
    if (!index.has(e)) {
      segments.push_back({own, topo.home_slot(e)});
      continue;
    }
    int32_t end = 0;
    match_expert(topo, counts, plan, index, e, supply, demand, [&](int s, int d, int32_t routes) {
      if (s != rank_idx) return;
      end += routes;
      segments.push_back({end, slot_of(topo, plan, index, e, d)});
    });
  }
  seg_begin[E] = static_cast<int32_t>(segments.size());

  std::vector<int32_t> ordinal(E, 0);
  std::vector<int32_t> cursor(seg_begin.begin(), seg_begin.end() - 1);
  for (size_t i = 0; i < topk_ids.size(); ++i) {
    const int32_t e = topk_ids[i];
    if (e == -1) {
      slot_ids[i] = -1;
      continue;
    }
    ISER_CHECK(e >= 0 && e < E, "expert id {} out of range [0, {}) at token {} choice {}", e, E,
               i / top_k, i % top_k);
    const int32_t k = ordinal[e]++;
    while (cursor[e] < seg_begin[e + 1] && segments[cursor[e]].end <= k) ++cursor[e];
    ISER_CHECK(cursor[e] < seg_begin[e + 1],
               "rank {} routes more tokens to expert {} than the count matrix holds ({})", rank_idx,
               e, counts.at(rank_idx, e));
    slot_ids[i] = segments[cursor[e]].slot;
  }
  for (int e = 0; e < E; ++e) {
    ISER_CHECK(ordinal[e] == counts.at(rank_idx, e),
               "rank {} routes {} tokens to expert {}, but the count matrix holds {}", rank_idx,
               ordinal[e], e, counts.at(rank_idx, e));
  }
}

}  // namespace iser
