// Chain leveling of the `iser` policy's kept placement (docs/design.md §5): quota moves along a
// chain of hosts, h → v1 → … → r, each link moving routes of one expert from a rank holding quota
// of it to another host of that expert. Every intermediate rank gives as many routes as it
// takes, so only h (the busiest rank) drops and r rises. Leveling one hop at a time
// (level_quotas in iser.cpp) stalls where the busiest rank's co-hosts are as busy as it is
// although a colder rank is a few broadcasts away. The GPU planner runs the same steps
// (src/cuda/plan_iser_chains.cuh); every tie rule below is part of the contract.
#include <algorithm>

#include "iser/error.h"
#include "planner/placement_common.h"

namespace iser {

// Each step, on the graph "a → b when a holds quota > 0 in a broadcast of an expert e and b
// hosts a broadcast of e" (hosts as in level_quotas: the group members other than the owner,
// plus the owner on its expert's latest broadcast; a link may thus move an expert's routes from
// one of its groups to another, or to its owner):
//  1. h = the busiest rank (ties: the lowest rank), m = the least loaded (ties: the lowest
//     rank); stop when L[h] <= stop_at or L[h] − L[m] < 2.
//  2. Breadth-first search from h, level by level: level d + 1 = the ranks not yet reached that
//     host a broadcast of an expert in one of whose broadcasts a rank of level d holds quota. It
//     stops after the level that reaches m, or when a level is empty.
//  3. Target r = the least loaded reached rank other than h (ties: the lowest rank); stop when
//     L[h] − L[r] < 2. (When m is reached, r = m.)
//  4. Path, from r back to h: the parent link of a rank c at level i + 1 is the lowest broadcast
//     x, of an expert e with a broadcast hosted by c, in which a rank of level i holds quota,
//     from the lowest such rank v; it moves routes from v's quota in x to c's quota in the
//     earliest broadcast of e that c hosts.
//  5. δ = min((L[h] − L[r]) / 2, the giver's quota on every link); each link moves δ routes.
// At most kIserChainSteps · P steps. A shortest path never uses one expert on two consecutive
// links (the earlier giver would reach the later receiver directly), and its ranks are
// distinct, so no link takes from a quota another link of the path fills: quotas stay >= 0.
// NOTE: L[r] + δ <= L[h] − δ, so no load rises above the old max, groups and payloads stay, and
// Σ quotas per expert is unchanged.
namespace {

// The broadcasts each rank hosts, ascending, as a CSR (ws.host_begin, ws.host_list); groups and
// latest stay fixed during a leveling. `cursor` [P]: scratch.
void list_hosted_broadcasts(int P, const Plan& plan, const std::vector<int32_t>& latest,
                            std::vector<int32_t>& cursor, PlannerWorkspace& ws) {
  const int num_broadcasts = static_cast<int>(plan.broadcasts.size());
  auto owner_hosts = [&](int b) { return latest[plan.broadcasts[b].expert] == b; };
  ws.host_begin.assign(P + 1, 0);
  for (int b = 0; b < num_broadcasts; ++b) {
    const Broadcast& x = plan.broadcasts[b];
    for (int r = x.group_begin; r < x.group_begin + x.group_size; ++r) {
      if (r != x.owner) ++ws.host_begin[r + 1];
    }
    if (owner_hosts(b)) ++ws.host_begin[x.owner + 1];
  }
  for (int r = 0; r < P; ++r) ws.host_begin[r + 1] += ws.host_begin[r];
  ws.host_list.resize(ws.host_begin[P]);
  std::copy(ws.host_begin.begin(), ws.host_begin.end() - 1, cursor.begin());
  for (int b = 0; b < num_broadcasts; ++b) {
    const Broadcast& x = plan.broadcasts[b];
    for (int r = x.group_begin; r < x.group_begin + x.group_size; ++r) {
      if (r != x.owner) ws.host_list[cursor[r]++] = b;
    }
    if (owner_hosts(b)) ws.host_list[cursor[x.owner]++] = b;
  }
}

}  // namespace

void level_chains(const Topology& topo, int32_t stop_at, PlannerWorkspace& ws, Plan& plan) {
  const int P = topo.num_ranks;
  const int num_broadcasts = static_cast<int>(plan.broadcasts.size());
  std::vector<int32_t>& L = plan.loads;
  // Step 1's first test before any set-up: most real inputs end at or below stop_at.
  if (*std::max_element(L.begin(), L.end()) <= stop_at) return;
  std::vector<int32_t>& latest = ws.order;        // latest broadcast of each expert
  std::vector<int32_t>& earlier = ws.group_room;  // [B] the expert's broadcast before b, -1 = none
  latest.assign(topo.num_experts, -1);
  earlier.resize(num_broadcasts);
  for (int b = 0; b < num_broadcasts; ++b) {
    earlier[b] = latest[plan.broadcasts[b].expert];
    latest[plan.broadcasts[b].expert] = b;
  }
  std::vector<int32_t>& depth = ws.members;           // BFS level of each rank, -1 = not reached
  std::vector<int32_t>& link_b = ws.recv_used;        // path link i: broadcast given from
  std::vector<int32_t>& link_v = ws.send_used;        // path link i: giving rank (i = its level)
  std::vector<int32_t>& link_y = ws.group_cold;       // path link i: broadcast received in
  std::vector<int32_t>& reached = ws.next_candidate;  // [E] BFS: level the expert was given from
  std::vector<int32_t>& hosted = ws.candidates;       // [E] backtrack: earliest broadcast c hosts
  std::vector<int32_t>& frontier = ws.repair;         // [P] BFS: ranks by level, in order reached
  std::vector<int32_t>& given = ws.chain_experts;     // [E] BFS: experts in order reached
  depth.resize(P);
  link_b.resize(P);
  link_v.resize(P);
  link_y.resize(P);
  // NOTE: reached and hosted are all -1 between uses: each step resets the entries it set.
  reached.assign(topo.num_experts, -1);
  hosted.assign(topo.num_experts, -1);
  frontier.resize(P);
  given.resize(topo.num_experts);
  auto owner_hosts = [&](int b) { return latest[plan.broadcasts[b].expert] == b; };
  list_hosted_broadcasts(P, plan, latest, link_b, ws);
  auto hosts = [&](int b, int r) {
    const Broadcast& x = plan.broadcasts[b];
    return r == x.owner ? owner_hosts(b) : x.in_group(r);
  };
  // The lowest rank of level d holding quota in b, -1 if none.
  auto lowest_giver = [&](int b, int d) {
    const Broadcast& x = plan.broadcasts[b];
    int v = -1;
    for (int r = x.group_begin; r < x.group_begin + x.group_size; ++r) {
      if (r != x.owner && depth[r] == d && x.quota[r] > 0) {
        v = r;
        break;
      }
    }
    if (owner_hosts(b) && depth[x.owner] == d && x.quota[x.owner] > 0 && (v < 0 || x.owner < v)) {
      v = x.owner;
    }
    return v;
  };
  const int max_steps = kIserChainSteps * P;
  for (int step = 0; step < max_steps; ++step) {
    int h = 0;
    int m = 0;
    for (int r = 1; r < P; ++r) {
      if (L[r] > L[h]) h = r;
      if (L[r] < L[m]) m = r;
    }
    if (L[h] <= stop_at || L[h] - L[m] < 2) break;
    std::fill(depth.begin(), depth.end(), -1);
    depth[h] = 0;
    frontier[0] = h;
    // NOTE: level d's ranks are frontier[level_begin, level_end), the experts it gives
    // given[given_begin, num_given). Step 2's sets do not depend on the order ranks and
    // broadcasts are visited in, so walking the broadcasts that level d's ranks host, and then
    // every broadcast of each expert they give, gives the same levels as scanning every
    // broadcast for a giver of level d.
    int level_begin = 0;
    int level_end = 1;
    int num_given = 0;
    for (int d = 0; depth[m] < 0; ++d) {
      const int given_begin = num_given;
      for (int i = level_begin; i < level_end; ++i) {
        const int v = frontier[i];
        for (int32_t k = ws.host_begin[v]; k < ws.host_begin[v + 1]; ++k) {
          const Broadcast& x = plan.broadcasts[ws.host_list[k]];
          if (reached[x.expert] < 0 && x.quota[v] > 0) {
            reached[x.expert] = d;
            given[num_given++] = x.expert;
          }
        }
      }
      int next_end = level_end;
      for (int j = given_begin; j < num_given; ++j) {
        for (int b = latest[given[j]]; b >= 0; b = earlier[b]) {
          const Broadcast& x = plan.broadcasts[b];
          for (int r = x.group_begin; r < x.group_begin + x.group_size; ++r) {
            if (depth[r] < 0 && hosts(b, r)) {
              depth[r] = d + 1;
              frontier[next_end++] = r;
            }
          }
          if (depth[x.owner] < 0 && owner_hosts(b)) {
            depth[x.owner] = d + 1;
            frontier[next_end++] = x.owner;
          }
        }
      }
      if (next_end == level_end) break;
      level_begin = level_end;
      level_end = next_end;
    }
    for (int j = 0; j < num_given; ++j) reached[given[j]] = -1;
    // The reached ranks other than h: frontier[1, level_end).
    int r = -1;
    for (int i = 1; i < level_end; ++i) {
      const int v = frontier[i];
      if (r < 0 || L[v] < L[r] || (L[v] == L[r] && v < r)) r = v;
    }
    if (r < 0 || L[h] - L[r] < 2) break;
    int32_t delta = (L[h] - L[r]) / 2;
    for (int c = r, i = depth[r] - 1; i >= 0; --i) {
      for (int32_t k = ws.host_begin[c + 1] - 1; k >= ws.host_begin[c]; --k) {
        hosted[plan.broadcasts[ws.host_list[k]].expert] = ws.host_list[k];
      }
      int b = 0;
      int v = -1;
      for (; b < num_broadcasts; ++b) {
        if (hosted[plan.broadcasts[b].expert] >= 0 && (v = lowest_giver(b, i)) >= 0) break;
      }
      ISER_CHECK(v >= 0, "iser chain leveling: rank {} at level {} has no parent (internal error)",
                 c, i + 1);
      link_b[i] = b;
      link_v[i] = v;
      link_y[i] = hosted[plan.broadcasts[b].expert];
      for (int32_t k = ws.host_begin[c]; k < ws.host_begin[c + 1]; ++k) {
        hosted[plan.broadcasts[ws.host_list[k]].expert] = -1;
      }
      delta = std::min(delta, plan.broadcasts[b].quota[v]);
      c = v;
    }
    for (int i = 0; i < depth[r]; ++i) {
      plan.broadcasts[link_b[i]].quota[link_v[i]] -= delta;
      plan.broadcasts[link_y[i]].quota[i + 1 < depth[r] ? link_v[i + 1] : r] += delta;
    }
    L[h] -= delta;
    L[r] += delta;
  }
}

}  // namespace iser
