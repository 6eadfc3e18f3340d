// `all-rank`: the paper's earlier per-invocation policy (§6.1 "An earlier policy that replicates
// four experts on every rank"): the S hottest experts of the invocation are copied to every rank.
//
// Definition:
//  * Experts ordered by hist descending (ties: smaller expert id); the first min(S, E) with
//    hist > 0 are replicated (a replica of an expert nobody routes to would move bytes for
//    nothing).
//  * Each is one broadcast to the level-0 group (all P ranks, owner included, so P - 1 remote
//    copies: 28/60/92 per layer at EP8/16/24 with S = 4, the paper's counts), helper index = its
//    position in that order, transport owner-direct (every broadcast targets the whole level-0
//    group with its owner inside: a pure group, DESIGN §4.6).
//  * Quotas: every rank computes its own routes of the replicated expert (q[r] = c[r][e]), so
//    those routes never leave their source rank and no further planning is needed. The paper
//    reports this policy's residual imbalance (R = 1.038/1.193/1.348 at EP8/16/24) but not its
//    split; docs/evaluation.md compares the replayed R with those numbers. Flows come from the
//    shared route rewrite (all local for the replicated experts).
#include <algorithm>
#include <numeric>

#include "iser/error.h"
#include "iser/rewrite.h"
#include "policies/factories.h"
#include "policies/quota_loads.h"

namespace iser {
namespace {

class AllRankPolicy final : public Policy {
 public:
  explicit AllRankPolicy(const Topology& topo) : topo_(topo) {}

  std::string_view name() const override { return "all-rank"; }

  ValidationOptions validation() const override {
    ValidationOptions v;
    v.unique_experts = true;
    return v;  // aligned (level 0) groups; exports per owner <= min(S, H) holds by construction
  }

  PolicyResult plan(const CountMatrix& counts) override {
    ISER_CHECK(counts.num_ranks() == topo_.num_ranks && counts.num_experts() == topo_.num_experts,
               "policy all-rank: count matrix {} x {} does not match topology P = {}, E = {}",
               counts.num_ranks(), counts.num_experts(), topo_.num_ranks, topo_.num_experts);
    const int P = topo_.num_ranks;
    const auto hist = counts.histogram();
    std::vector<int32_t> order(topo_.num_experts);
    std::iota(order.begin(), order.end(), 0);
    const int num_top = std::min(topo_.num_slots, topo_.num_experts);
    std::partial_sort(
        order.begin(), order.begin() + num_top, order.end(),
        [&](int32_t a, int32_t b) { return hist[a] > hist[b] || (hist[a] == hist[b] && a < b); });

    PolicyResult result;
    result.plan = make_empty_plan(topo_, counts);
    for (int i = 0; i < num_top && hist[order[i]] > 0; ++i) {
      const int e = order[i];
      Broadcast b;
      b.expert = e;
      b.owner = topo_.owner_of(e);
      b.level = 0;
      b.group_begin = 0;
      b.group_size = P;
      b.helper = i;
      b.mode = TransportMode::kOwnerDirect;
      b.quota.resize(P);
      for (int r = 0; r < P; ++r) b.quota[r] = counts.at(r, e);
      result.plan.broadcasts.push_back(std::move(b));
    }
    result.plan.loads = loads_from_quotas(topo_, counts, result.plan.broadcasts);
    result.flows = rewrite_flows(topo_, counts, result.plan);
    return result;
  }

 private:
  Topology topo_;
};

}  // namespace

std::unique_ptr<Policy> make_all_rank_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<AllRankPolicy>(topo);
}

}  // namespace iser
