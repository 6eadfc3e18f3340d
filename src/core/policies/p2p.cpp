// `p2p` and `p2p-limited`: the greedy point-to-point planner of the paper's Motivation 2 (§3.2),
// modelled on UltraEP/MegaFlux: like HALO-Q's placement it takes the hottest rank's busiest home
// experts to the coldest ranks, but copies each replica straight from the owner to one rank.
//
// Exact greedy (T = ceil(total routes / P), the water level of every policy; "above/below the
// mean" is L > T / L < T so that every move is a whole number of routes):
//   state: L[r] = home loads; rest[e] = routes of e still on its owner (hist[e]); per rank its
//          replicas and next free helper index; per owner its copies; frozen ranks; experts
//          with no destination left ("exhausted").
//   loop:
//     o = the non-frozen rank with the largest L (ties: lowest rank); stop if none; freeze o
//         and continue if L[o] <= T (with LSA teams T is o's team's level: max(T, ceil(team
//         routes / team size)), and m below is taken from o's team only).
//     p2p-limited only: if o already sent S copies, freeze o and continue.
//     e = o's home expert with the largest rest[e] > 0 that is not exhausted (ties: smaller id);
//         none -> freeze o and continue.
//     m = the rank != o of o's LSA team with the smallest L < T that has a free helper slot and
//     holds no replica
//         of e (ties: lowest rank); none -> mark e exhausted and continue.
//     move = min(L[o] - T, T - L[m], rest[e]) (> 0); copy e to m's next free helper slot;
//     m computes `move` routes of e; L[o] -= move, L[m] += move, rest[e] -= move.
// An expert may be copied again, to another rank, while routes of it remain on the owner: a hot
// expert needs several replicas (the owner fan-out the paper measures). The loop ends: each pass
// freezes a rank, exhausts an expert or fills a helper slot, and below-T ranks never reappear
// (only owners above T lose load, and never below T).
//
// Plan: one Broadcast per replica: group = {m} (size 1), level kUnalignedLevel, transport
// kPointToPoint, quota[m] = move; the owner's remaining routes rest[e] are its quota on the first
// broadcast of e, so an expert's quotas sum to hist[e]. Each replica is one payload out of the
// owner. Flows: the shared route rewrite (local first, north-west corner, quotas of one expert
// combined over its broadcasts).
#include <algorithm>

#include "iser/error.h"
#include "iser/rewrite.h"
#include "policies/factories.h"
#include "policies/quota_loads.h"

namespace iser {
namespace {

class P2pPolicy final : public Policy {
 public:
  P2pPolicy(const Topology& topo, bool limited) : topo_(topo), limited_(limited) {}

  std::string_view name() const override { return limited_ ? "p2p-limited" : "p2p"; }

  ValidationOptions validation() const override {
    ValidationOptions v;
    v.require_aligned_groups = false;
    v.max_exports_per_owner = limited_ ? topo_.num_slots : 0;  // 0: unlimited
    return v;
  }

  PolicyResult plan(const CountMatrix& counts) override {
    ISER_CHECK(counts.num_ranks() == topo_.num_ranks && counts.num_experts() == topo_.num_experts,
               "policy {}: count matrix {} x {} does not match topology P = {}, E = {}", name(),
               counts.num_ranks(), counts.num_experts(), topo_.num_ranks, topo_.num_experts);
    PolicyResult result;
    result.plan = make_empty_plan(topo_, counts);
    result.plan.broadcasts = place(counts, result.plan.target);
    result.plan.loads = loads_from_quotas(topo_, counts, result.plan.broadcasts);
    result.flows = rewrite_flows(topo_, counts, result.plan);
    return result;
  }

 private:
  std::vector<Broadcast> place(const CountMatrix& counts, int64_t target) const {
    const int P = topo_.num_ranks;
    const int H = topo_.experts_per_rank();
    const int S = topo_.num_slots;
    const auto hist = counts.histogram();
    std::vector<int64_t> load = counts.home_loads(topo_);
    std::vector<int64_t> rest(hist.begin(), hist.end());
    std::vector<std::vector<int32_t>> replicas(P);  // experts copied to each rank (<= S)
    std::vector<int32_t> copies(P, 0);
    std::vector<bool> frozen(P, false);
    std::vector<bool> exhausted(topo_.num_experts, false);
    std::vector<int32_t> first_broadcast(topo_.num_experts, -1);
    std::vector<Broadcast> broadcasts;
    // Water level per LSA team: a hot team cannot get below its own mean (copies stay inside
    // it); with one team every entry is `target`.
    std::vector<int64_t> water(topo_.num_teams(), target);
    for (int t = 0; t < topo_.num_teams(); ++t) {
      int64_t routes = 0;
      for (int r = t * topo_.team_size(); r < (t + 1) * topo_.team_size(); ++r) routes += load[r];
      water[t] = std::max(target, (routes + topo_.team_size() - 1) / topo_.team_size());
    }

    while (true) {
      int o = -1;
      for (int r = 0; r < P; ++r) {
        if (!frozen[r] && (o < 0 || load[r] > load[o])) o = r;
      }
      if (o < 0) break;
      const int64_t level = water[topo_.team_of(o)];
      if (load[o] <= level) {  // the busiest rank left is done; with one team so are all others
        frozen[o] = true;
        continue;
      }
      if (limited_ && copies[o] >= S) {
        frozen[o] = true;
        continue;
      }
      int e = -1;
      for (int x = topo_.first_home_expert(o); x < topo_.first_home_expert(o) + H; ++x) {
        if (!exhausted[x] && rest[x] > 0 && (e < 0 || rest[x] > rest[e])) e = x;
      }
      if (e < 0) {
        frozen[o] = true;
        continue;
      }
      int m = -1;
      for (int r = 0; r < P; ++r) {
        if (r == o || load[r] >= level || static_cast<int>(replicas[r].size()) >= S) continue;
        if (topo_.team_of(r) != topo_.team_of(o)) continue;  // copies stay inside the LSA team
        if (std::find(replicas[r].begin(), replicas[r].end(), e) != replicas[r].end()) continue;
        if (m < 0 || load[r] < load[m]) m = r;
      }
      if (m < 0) {
        exhausted[e] = true;
        continue;
      }
      const int64_t move = std::min({load[o] - level, level - load[m], rest[e]});
      Broadcast b;
      b.expert = e;
      b.owner = o;
      b.level = kUnalignedLevel;
      b.group_begin = m;
      b.group_size = 1;
      b.helper = static_cast<int32_t>(replicas[m].size());
      b.mode = TransportMode::kPointToPoint;
      b.quota.assign(P, 0);
      b.quota[m] = static_cast<int32_t>(move);
      if (first_broadcast[e] < 0) first_broadcast[e] = static_cast<int32_t>(broadcasts.size());
      broadcasts.push_back(std::move(b));
      replicas[m].push_back(e);
      ++copies[o];
      load[o] -= move;
      load[m] += move;
      rest[e] -= move;
    }
    for (int e = 0; e < topo_.num_experts; ++e) {
      if (first_broadcast[e] >= 0) {
        broadcasts[first_broadcast[e]].quota[topo_.owner_of(e)] = static_cast<int32_t>(rest[e]);
      }
    }
    return broadcasts;
  }

  Topology topo_;
  bool limited_;
};

}  // namespace

std::unique_ptr<Policy> make_p2p_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<P2pPolicy>(topo, false);
}

std::unique_ptr<Policy> make_p2p_limited_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<P2pPolicy>(topo, true);
}

}  // namespace iser
