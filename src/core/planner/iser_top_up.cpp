// Top-up exports of the `iser` policy's kept placement (docs/design.md §5). A candidate placed at
// a slack water level W = T + T/d leaves the ranks between T and W out of the owners, and chain
// leveling cannot lower a busiest rank that holds no quota of a replicated expert. When such a
// rank still has an export left and its team has aligned groups with free helper slots, one more
// broadcast of its hottest home expert lowers the max load. The GPU planner runs the same steps
// (src/cuda/plan_iser_chains.cuh); every tie rule below is part of the contract.
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
//     finer level, then the lower first rank); stop when none absorbs anything, or when it
//     absorbs fewer than options.min_move routes and the broadcast would not be resident (the
//     placement's rule, matches_previous; the GPU planner has no previous plan).
//  4. Its members take routes coldest first up to W (fill_quotas_coldest_first); h keeps
//     hist[e] − moved in the new broadcast, which is appended to the plan.
// NOTE: every member ends at or below W < L[h] and h drops by moved > 0, so the max load never
// rises; e had no broadcast, so its groups stay disjoint; owner payloads stay <= S and every
// member keeps at most S received slots, so the coloring still succeeds. At most P · S steps
// (each adds a broadcast owned by h, and h owns at most S).
void top_up_exports(const Topology& topo, const HaloQOptions& options, int32_t stop_at,
                    PlannerWorkspace& ws, Plan& plan) {
  const int P = topo.num_ranks;
  const int H = topo.experts_per_rank();
  const int S = topo.num_slots;
  std::vector<int32_t>& L = plan.loads;
  // Step 1's first test before any set-up: most inputs end at or below stop_at.
  if (*std::max_element(L.begin(), L.end()) <= stop_at) return;
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
    if (L[h] <= stop_at || sent[h] >= S) return;
    int e = -1;
    for (int x = h * H; x < (h + 1) * H; ++x) {
      if (broadcast_of[x] == 0 && (e < 0 || ws.hist[x] > ws.hist[e])) e = x;
    }
    if (e < 0 || ws.hist[e] <= 0) return;
    const int32_t water = ws.team_water[topo.team_of(h)];
    const int32_t give = std::min(L[h] - water, ws.hist[e]);
    int best_level = -1;
    int best_begin = 0;
    int32_t best_absorbed = 0;
    const int team_begin = topo.team_of(h) * topo.team_size();
    for (int level = topo.num_levels() - 1; level >= 0; --level) {
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
      }
    }
    if (best_level < 0) return;
    if (best_absorbed < options.min_move &&
        !matches_previous(options, e, best_level, best_begin, topo.group_size(best_level))) {
      return;
    }
    plan.broadcasts.emplace_back();
    Broadcast& b = plan.broadcasts.back();
    const int32_t moved =
        fill_quotas_coldest_first(topo, best_level, best_begin, h, water, give, L, ws, b.quota);
    ISER_CHECK(moved == best_absorbed, "top_up_exports: the fill moved {} of {} routes", moved,
               best_absorbed);
    b.quota[h] = ws.hist[e] - moved;
    commit_broadcast(topo, e, h, best_level, best_begin, ws, L, b);  // ++ws.recv_used (= recv)
    L[h] -= moved;
    ++sent[h];
    broadcast_of[e] = 1;
  }
}

}  // namespace iser
