// Top-up exports of the `iser` policy's kept placement (docs/design.md §5). A candidate placed at
// a slack water level W = T + T/d leaves the ranks between T and W out of the owners, and chain
// leveling cannot lower a busiest rank that holds no quota of a replicated expert. When such a
// rank still has an export left and its team has aligned groups with free helper slots, one more
// broadcast of its hottest home expert lowers the max load. Where no such group has room of its
// own (every member at or above W) but one has free helper slots, a relay broadcast goes there:
// it moves nothing itself, and chain leveling then carries h's routes through its members to
// colder hosts of the experts they compute (h → member → …). The GPU planner runs the same steps
// (src/cuda/plan_iser_top_up.cuh); every tie rule below is part of the contract.
#include <algorithm>

#include "iser/error.h"
#include "planner/placement_common.h"

namespace iser {

// Each step:
//  1. h = the busiest rank (ties: the lowest rank); stop when L[h] <= stop_at, or when h owns S
//     broadcasts already.
//  2. e = h's home expert with the largest hist that has no broadcast yet (ties: the lowest id);
//     stop when there is none or its hist is 0.
//  3. W = ws.team_water of h's team (the level its team can reach), give = min(L[h] − W,
//     hist[e]). Among the aligned groups of h's team that do not contain h and whose members all
//     have a free helper slot (recv_used < S, every member of every group counted, as the
//     placement counts), the one absorbing the most, min(Σ max(0, W − L[m]), give) (ties: the
//     finer level, then the lower first rank). When none absorbs anything: with `relay`, the
//     relay group = the finest level's eligible group with the lowest first rank (a coarser
//     one would only take more helper slots), else stop; stop when there is none. Stop also when
//     the group absorbs fewer than options.min_move routes and the broadcast would not be resident
//     (the placement's rule, matches_previous; the GPU planner has no previous plan); a relay
//     broadcast is exempt (it moves routes only through the chains that follow).
//  4. Its members take routes coldest first up to W (fill_quotas_coldest_first; a relay group's
//     members take nothing); h keeps hist[e] − moved in the new broadcast, which is appended to
//     the plan. After a relay broadcast the steps stop (the chains decide whether it carries
//     routes) and the function returns true.
// NOTE: every member ends at or below W < L[h] and h drops by moved >= 0, so the max load never
// rises; e had no broadcast, so its groups stay disjoint; owner payloads stay <= S and every
// member keeps at most S received slots, so the coloring still succeeds. At most P · S steps
// (each adds a broadcast owned by h, and h owns at most S).
bool top_up_exports(const Topology& topo, const HaloQOptions& options, int32_t stop_at, bool relay,
                    PlannerWorkspace& ws, Plan& plan) {
  const int P = topo.num_ranks;
  const int H = topo.experts_per_rank();
  const int S = topo.num_slots;
  std::vector<int32_t>& L = plan.loads;
  // Step 1's first test before any set-up: most inputs end at or below stop_at.
  if (*std::max_element(L.begin(), L.end()) <= stop_at) return false;
  ws.members.resize(P);
  std::vector<int32_t>& recv = ws.recv_used;
  std::vector<int32_t>& sent = ws.send_used;
  std::vector<int32_t>& broadcast_of = ws.order;  // 1 when the expert has a broadcast
  recv.assign(P, 0);
  sent.assign(P, 0);
  broadcast_of.assign(topo.num_experts, 0);
  for (const Broadcast& b : plan.broadcasts) {
    ++sent[b.owner];
    broadcast_of[b.expert] = 1;
    for (int m = b.group_begin; m < b.group_begin + b.group_size; ++m) ++recv[m];
  }
  for (int step = 0; step < P * S; ++step) {
    int h = 0;
    for (int r = 1; r < P; ++r) {
      if (L[r] > L[h]) h = r;
    }
    if (L[h] <= stop_at || sent[h] >= S) return false;
    int e = -1;
    for (int x = h * H; x < (h + 1) * H; ++x) {
      if (broadcast_of[x] == 0 && (e < 0 || ws.hist[x] > ws.hist[e])) e = x;
    }
    if (e < 0 || ws.hist[e] <= 0) return false;
    const int32_t water = ws.team_water[topo.team_of(h)];
    const int32_t give = std::min(L[h] - water, ws.hist[e]);
    int best_level = -1;
    int best_begin = 0;
    int32_t best_absorbed = 0;
    int relay_begin = -1;  // the relay group (finest level), -1 = none
    const int team_begin = topo.team_of(h) * topo.team_size();
    const int finest = topo.num_levels() - 1;
    for (int level = finest; level >= 0; --level) {
      const int size = topo.group_size(level);
      for (int begin = team_begin; begin < team_begin + topo.team_size(); begin += size) {
        if (h >= begin && h < begin + size) continue;
        bool eligible = true;
        int32_t room = 0;
        for (int m = begin; m < begin + size; ++m) {
          eligible = eligible && recv[m] < S;
          room += std::max(0, water - L[m]);
        }
        const int32_t absorbed = std::min(room, give);
        if (eligible && absorbed > best_absorbed) {
          best_absorbed = absorbed;
          best_level = level;
          best_begin = begin;
        }
        if (eligible && level == finest && relay_begin < 0) relay_begin = begin;
      }
    }
    const bool relaying = best_level < 0;
    if (relaying) {
      if (!relay || relay_begin < 0) return false;
      best_level = finest;
      best_begin = relay_begin;
    } else if (best_absorbed < options.min_move &&
               !matches_previous(options, e, best_level, best_begin, topo.group_size(best_level))) {
      return false;
    }
    plan.broadcasts.emplace_back();
    Broadcast& b = plan.broadcasts.back();
    const int32_t moved =
        fill_quotas_coldest_first(topo, best_level, best_begin, h, water, give, L, ws, b.quota);
    ISER_CHECK(moved == best_absorbed, "top_up_exports: the fill moved {} of {} routes", moved,
               best_absorbed);  // a relay group: 0 of 0 (every member at or above W)
    b.quota[h] = ws.hist[e] - moved;
    commit_broadcast(topo, e, h, best_level, best_begin, ws, L, b);  // ++ws.recv_used (= recv)
    L[h] -= moved;
    ++sent[h];
    broadcast_of[e] = 1;
    if (relaying) return true;
  }
  return false;
}

}  // namespace iser
