// `all-rank` and `all-rank-balanced`: the paper's earlier per-invocation policy (§6.1 "An earlier
// policy that replicates four experts on every rank"): the S hottest experts of the invocation
// are copied to every rank.
//
// Definition (both):
//  * Experts ordered by hist descending (ties: smaller expert id); the first min(S, E) with
//    hist > 0 are replicated (a replica of an expert nobody routes to would move bytes for
//    nothing).
//  * Each is one broadcast to the level-0 group (all P ranks, owner included, so P - 1 remote
//    copies: 28/60/92 per layer at EP8/16/24 with S = 4, the paper's counts), helper index = its
//    position in that order, transport owner-direct (every broadcast targets the whole level-0
//    group with its owner inside: a pure group, docs/design.md §4.6). Flows come from the shared
//    route rewrite (local first, north-west corner).
// LSA teams: ignored. The copies go to all P ranks across teams (the paper's policy, a baseline);
// with several teams the groups are therefore not aligned groups of the topology.
// Quotas (the paper gives the policy's residual R = 1.038/1.193/1.348 at EP8/16/24, not its
// split):
//  * `all-rank`: every rank computes its own routes of a replicated expert (q[r] = c[r][e]); no
//    route of those experts leaves its source rank.
//  * `all-rank-balanced`: the replicated experts' routes M fill the ranks water-level style. Base
//    loads B[r] = home loads without the replicated experts; λ = the smallest integer with
//    Σ_r max(0, λ - B[r]) >= M; rank r takes Q[r] = max(0, λ - 1 - B[r]), and the M - ΣQ routes
//    left add one each to the ranks with B[r] <= λ - 1, lowest rank first. Q[r] is then split
//    over the experts local first: each rank takes its own routes of the experts (replication
//    order) up to Q[r]; the routes left of each expert (in that order) fill the ranks' remaining
//    Q in rank order. This is the split that lets a copy on every rank balance best; own-routes
//    quotas remove only the replicated experts' imbalance at the owner.
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
  AllRankPolicy(const Topology& topo, bool balanced) : topo_(topo), balanced_(balanced) {}

  std::string_view name() const override { return balanced_ ? "all-rank-balanced" : "all-rank"; }

  ValidationOptions validation() const override {
    ValidationOptions v;
    v.unique_experts = true;
    // all-rank ignores LSA teams: its groups are all P ranks, a level-0 group only with one team.
    v.require_team_local = false;
    v.require_aligned_groups = topo_.num_teams() == 1;
    return v;  // exports per owner <= min(S, H) holds by construction
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
    if (balanced_) balance_quotas(counts, hist, result.plan.broadcasts);
    result.plan.loads = loads_from_quotas(topo_, counts, result.plan.broadcasts);
    result.flows = rewrite_flows(topo_, counts, result.plan);
    return result;
  }

 private:
  // Replaces own-routes quotas by the water-level split described at the top of the file.
  void balance_quotas(const CountMatrix& counts, const std::vector<int64_t>& hist,
                      std::vector<Broadcast>& broadcasts) const {
    const int P = topo_.num_ranks;
    std::vector<int64_t> base = counts.home_loads(topo_);
    int64_t mass = 0;
    for (const Broadcast& b : broadcasts) {
      base[b.owner] -= hist[b.expert];
      mass += hist[b.expert];
    }
    // Smallest integer level whose room holds the mass (room grows with the level).
    const auto room = [&](int64_t level) {
      int64_t sum = 0;
      for (const int64_t l : base) sum += std::max<int64_t>(0, level - l);
      return sum;
    };
    int64_t lo = *std::min_element(base.begin(), base.end());  // room(lo) = 0 <= mass
    int64_t hi = lo + mass;                                    // room(hi) >= mass
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (room(mid) >= mass) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    std::vector<int64_t> want(P);
    int64_t left = mass;
    for (int r = 0; r < P; ++r) {
      want[r] = std::max<int64_t>(0, lo - 1 - base[r]);
      left -= want[r];
    }
    for (int r = 0; r < P && left > 0; ++r) {
      if (base[r] <= lo - 1) {
        ++want[r];
        --left;
      }
    }
    // Local first, then the leftover routes of each expert in rank order.
    std::vector<int64_t> unplaced(broadcasts.size());
    for (size_t i = 0; i < broadcasts.size(); ++i) {
      Broadcast& b = broadcasts[i];
      unplaced[i] = hist[b.expert];
      for (int r = 0; r < P; ++r) {
        const int64_t take = std::min<int64_t>(counts.at(r, b.expert), want[r]);
        b.quota[r] = static_cast<int32_t>(take);
        want[r] -= take;
        unplaced[i] -= take;
      }
    }
    for (size_t i = 0; i < broadcasts.size(); ++i) {
      for (int r = 0; r < P && unplaced[i] > 0; ++r) {
        const int64_t take = std::min(unplaced[i], want[r]);
        broadcasts[i].quota[r] += static_cast<int32_t>(take);
        want[r] -= take;
        unplaced[i] -= take;
      }
      ISER_CHECK(unplaced[i] == 0, "all-rank-balanced: {} routes of expert {} left unplaced",
                 unplaced[i], broadcasts[i].expert);
    }
  }

  Topology topo_;
  bool balanced_;
};

}  // namespace

std::unique_ptr<Policy> make_all_rank_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<AllRankPolicy>(topo, false);
}

std::unique_ptr<Policy> make_all_rank_balanced_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<AllRankPolicy>(topo, true);
}

}  // namespace iser
