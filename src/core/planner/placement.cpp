// HALO-Q stage 2: placement (docs/design.md §4.2).
//
// Interpretations of docs/design.md §4.2 (each marked "Interpretation:" below) are choices the GPU
// planner must make the same way:
//  - hist, loads, T and every sum are int32; the total number of routes is checked against
//    kMaxPlannerRoutes so no intermediate overflows. ceil(a / b) is computed as a / b + (a % b
//    != 0), never as (a + b - 1) / b.
//  - "largest L above T" means L[o] > T strictly.
//  - "wanted level = finest level whose group size >= need": level 0 (size P) always qualifies
//    because mass <= Σ L <= P·T. With LSA teams level 0 is the owner's team and T its water
//    level W (below), and it still qualifies: mass <= the team's routes <= lsa_size·W.
//  - Groups are only ever searched inside the owner's LSA team (docs/design.md §3).
//  - room(G) counts members other than the owner; the owner's own deficit never counts.
//  - q[o] = mass − moved (docs/design.md §4.2, step 6).
//  - "coldest first by L before this step": members sorted by (L, rank) ascending, with L as it
//    was before this broadcast; members at or above T take nothing.
//  - The pass budget P·(C + 2) counts every pass, including those that only freeze an owner.
//  - A replication skipped by min_move (a variant) is not committed and does not freeze the
//    owner: its cursor has already advanced. A replication that would be resident (same expert,
//    level and group as in options.previous) moves no bytes and is never skipped.
#include <algorithm>
#include <array>

#include "iser/error.h"
#include "iser/planner.h"
#include "planner/placement_common.h"

namespace iser {

void top_home_experts(const Topology& topo, int owner, int count, const std::vector<int32_t>& hist,
                      int32_t* top) {
  const int H = topo.experts_per_rank();
  const int C = count;
  ISER_CHECK(C >= 1 && C <= kMaxTopHomeExperts && C <= H, "top_home_experts: count {} (H = {})", C,
             H);
  // NOTE: the kept hist values live in `kept` (not re-read through top[]): hist >= 0, so -1
  // admits any expert while fewer than C are kept.
  std::array<int32_t, kMaxTopHomeExperts> kept;
  int32_t admit_above = -1;
  int filled = 0;
  for (int e = owner * H; e < (owner + 1) * H; ++e) {
    const int32_t h = hist[e];
    if (h <= admit_above) continue;  // the common case: not top-C
    // Insertion into the sorted prefix: strictly heavier moves ahead, so an equal hist keeps
    // the earlier (smaller) expert first.
    int pos = filled < C ? filled : C - 1;
    while (pos > 0 && kept[pos - 1] < h) {
      kept[pos] = kept[pos - 1];
      top[pos] = top[pos - 1];
      --pos;
    }
    kept[pos] = h;
    top[pos] = e;
    if (filled < C) ++filled;
    if (filled == C) admit_above = kept[C - 1];
  }
}

namespace {

int32_t ceil_div(int32_t a, int32_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

struct GroupChoice {
  int level = -1;
  int begin = 0;
  int32_t room = 0;
};

// Best eligible group at one level: every member (the owner too when it is one) has a free
// helper slot; most room, ties to the lowest first rank. room = -1 when none is eligible.
GroupChoice best_group(const Topology& topo, int level, int owner, int32_t target,
                       const std::vector<int32_t>& loads, const HaloQOptions& options,
                       const PlannerWorkspace& ws) {
  const int size = topo.group_size(level);
  const int S = topo.num_slots;
  GroupChoice best{level, 0, -1};
  // An owner replicates only inside its own LSA team (all groups when there is one team).
  int g_first = topo.first_group_of_team(level, owner);
  int g_last = g_first + topo.groups_per_team(level);
  if (options.owner_in_group) {
    g_first = topo.group_of(level, owner);
    g_last = g_first + 1;
  }
  for (int g = g_first; g < g_last; ++g) {
    const int begin = g * size;
    int32_t room = 0;
    bool eligible = true;
    for (int m = begin; m < begin + size; ++m) {
      if (ws.recv_used[m] >= S) {
        eligible = false;
        break;
      }
      if (m != owner && loads[m] < target) room += target - loads[m];
    }
    if (eligible && room > best.room) best = {level, begin, room};
  }
  return best;
}

// Interpretation: the level walk. Reference: from the wanted level toward 0, the first level whose
// best group has room > 0. absorb: a level is accepted at once only if its room >= give; otherwise
// the best fallback seen (most room; ties keep the finer level) is taken when no level absorbs
// give.
GroupChoice choose_group(const Topology& topo, int wanted_level, int owner, int32_t target,
                         int32_t give, const std::vector<int32_t>& loads,
                         const HaloQOptions& options, const PlannerWorkspace& ws) {
  GroupChoice fallback{-1, 0, 0};
  for (int level = wanted_level; level >= 0; --level) {
    const GroupChoice g = best_group(topo, level, owner, target, loads, options, ws);
    if (g.room <= 0) continue;
    if (!options.absorb || g.room >= give) return g;
    if (g.room > fallback.room) fallback = g;
  }
  return fallback;
}

}  // namespace

bool matches_previous(const HaloQOptions& options, int32_t expert, int32_t level,
                      int32_t group_begin, int32_t group_size) {
  if (options.previous == nullptr) return false;
  for (const Broadcast& b : options.previous->broadcasts) {
    if (b.expert == expert && b.level == level && b.group_begin == group_begin &&
        b.group_size == group_size) {
      return true;
    }
  }
  return false;
}

// hist, home loads and T into ws / plan (shared with the iser placement).
int32_t prepare_loads(const Topology& topo, const CountMatrix& counts, PlannerWorkspace& ws,
                      Plan& plan) {
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const int H = topo.experts_per_rank();
  const int S = topo.num_slots;
  ISER_CHECK(counts.num_ranks() == P && counts.num_experts() == E,
             "count matrix {} x {} does not match topology P = {}, E = {}", counts.num_ranks(),
             counts.num_experts(), P, E);

  // hist and home loads, checked so that every later int32 sum fits.
  // NOTE: one branch-free pass per row (sign bits OR-ed, sums in int64); checks run per row.
  ws.hist.assign(E, 0);
  int32_t* hist = ws.hist.data();
  int64_t total = 0;
  for (int s = 0; s < P; ++s) {
    const int32_t* row = counts.row(s).data();
    int32_t sign = 0;
    int64_t row_sum = 0;
    for (int e = 0; e < E; ++e) {
      const int32_t x = row[e];
      sign |= x;
      row_sum += x;
      hist[e] += x;
    }
    if (sign < 0) {
      const int bad =
          static_cast<int>(std::find_if(row, row + E, [](int32_t x) { return x < 0; }) - row);
      throw Error(fmt::format("negative count c[{}][{}] = {}", s, bad, row[bad]));
    }
    total += row_sum;
    ISER_CHECK(total <= kMaxPlannerRoutes,
               "count matrix holds more than {} routes (planner limit) by row {}",
               kMaxPlannerRoutes, s);
  }
  plan.num_ranks = P;
  plan.num_experts = E;
  plan.num_slots = S;
  std::vector<int32_t>& L = plan.loads;
  L.assign(P, 0);
  for (int r = 0; r < P; ++r) {
    for (int e = r * H; e < (r + 1) * H; ++e) L[r] += hist[e];
  }
  const int32_t T = ceil_div(static_cast<int32_t>(total), P);
  plan.target = T;

  return T;
}

void team_water_levels(const Topology& topo, int32_t target, int32_t slack_divisor,
                       const std::vector<int32_t>& home_loads, PlannerWorkspace& ws) {
  const int num_teams = topo.num_teams();
  const int size = topo.team_size();
  ws.team_water.assign(num_teams, 0);
  for (int t = 0; t < num_teams; ++t) {
    int32_t routes = 0;  // fits: the total is at most kMaxPlannerRoutes
    for (int r = t * size; r < (t + 1) * size; ++r) routes += home_loads[r];
    const int32_t level = std::max(target, ceil_div(routes, size));
    ws.team_water[t] = level + (slack_divisor > 0 ? level / slack_divisor : 0);
  }
}

void place_broadcasts(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
                      PlannerWorkspace& ws, Plan& plan) {
  prepare_loads(topo, counts, ws, plan);
  place_prepared(topo, options, ws, plan);
}

int32_t fill_quotas_coldest_first(const Topology& topo, int32_t level, int32_t group_begin,
                                  int32_t owner, int32_t water, int32_t give,
                                  const std::vector<int32_t>& loads, PlannerWorkspace& ws,
                                  std::vector<int32_t>& quota) {
  const int size = topo.group_size(level);
  int num_members = 0;
  for (int m = group_begin; m < group_begin + size; ++m) {
    if (m != owner) ws.members[num_members++] = m;
  }
  std::sort(ws.members.begin(), ws.members.begin() + num_members, [&](int32_t a, int32_t b) {
    return loads[a] != loads[b] ? loads[a] < loads[b] : a < b;
  });
  quota.assign(topo.num_ranks, 0);
  int32_t remaining = give;
  for (int i = 0; i < num_members && remaining > 0; ++i) {
    const int32_t m = ws.members[i];
    if (loads[m] >= water) break;  // sorted by load: every later member is at or above it too
    const int32_t take = std::min(water - loads[m], remaining);
    quota[m] = take;
    remaining -= take;
  }
  return give - remaining;
}

void commit_broadcast(const Topology& topo, int32_t expert, int32_t owner, int32_t level,
                      int32_t group_begin, PlannerWorkspace& ws, std::vector<int32_t>& loads,
                      Broadcast& b) {
  const int32_t size = topo.group_size(level);
  b.expert = expert;
  b.owner = owner;
  b.level = level;
  b.group_begin = group_begin;
  b.group_size = size;
  b.helper = 0;
  b.mode = TransportMode::kOwnerDirect;
  b.resident = false;
  for (int m = group_begin; m < group_begin + size; ++m) {
    ++ws.recv_used[m];
    if (m != owner) loads[m] += b.quota[m];
  }
}

void place_prepared(const Topology& topo, const HaloQOptions& options, PlannerWorkspace& ws,
                    Plan& plan) {
  const int P = topo.num_ranks;
  const int S = topo.num_slots;
  const int C = topo.max_exports_per_owner();
  std::vector<int32_t>& L = plan.loads;
  // Interpretation: with LSA teams the water level T is per team (team_water_levels); with one
  // team it is plan.target.
  team_water_levels(topo, plan.target, 0, L, ws);
  const int num_teams = topo.num_teams();  // no division per rank with one team
  const int team_size = topo.team_size();
  auto water = [&](int r) { return ws.team_water[num_teams == 1 ? 0 : r / team_size]; };

  // An owner's top-C list is filled on its first pass (most owners of a real input have none).
  ws.candidates.assign(static_cast<size_t>(P) * C, -1);
  ws.recv_used.assign(P, 0);
  ws.send_used.assign(P, 0);
  ws.next_candidate.assign(P, 0);
  ws.frozen.assign(P, 0);
  ws.members.resize(P);

  // Reuse the broadcasts' quota vectors across calls.
  size_t num_broadcasts = 0;
  const int finest_level = topo.num_levels() - 1;
  const int64_t max_passes = static_cast<int64_t>(P) * (C + 2);
  for (int64_t pass = 0; pass < max_passes; ++pass) {
    int o = -1;
    for (int r = 0; r < P; ++r) {
      if (!ws.frozen[r] && L[r] > water(r) && (o < 0 || L[r] > L[o])) o = r;
    }
    if (o < 0) break;
    const int32_t T = water(o);
    if (ws.send_used[o] >= S || ws.next_candidate[o] >= C) {
      ws.frozen[o] = 1;
      continue;
    }
    int32_t* top = ws.candidates.data() + static_cast<size_t>(o) * C;
    if (top[0] < 0) top_home_experts(topo, o, C, ws.hist, top);
    const int32_t e = top[ws.next_candidate[o]];
    ++ws.next_candidate[o];  // the cursor advances even if this attempt fails
    const int32_t mass = ws.hist[e];
    if (mass == 0) {
      ws.frozen[o] = 1;
      continue;
    }
    const int32_t give = std::min(L[o] - T, mass);
    if (give <= 0) {
      ws.frozen[o] = 1;
      continue;
    }
    const int32_t need = std::max(1, ceil_div(mass, std::max(T, 1)));
    int wanted_level = 0;
    for (int level = finest_level; level >= 0; --level) {
      if (topo.group_size(level) >= need) {
        wanted_level = level;
        break;
      }
    }
    const GroupChoice g = choose_group(topo, wanted_level, o, T, give, L, options, ws);
    if (g.level < 0) {
      ws.frozen[o] = 1;
      continue;
    }

    // Quotas are written straight into the next broadcast; it is committed only if it moves.
    if (plan.broadcasts.size() <= num_broadcasts) plan.broadcasts.emplace_back();
    Broadcast& b = plan.broadcasts[num_broadcasts];
    const int32_t moved =
        fill_quotas_coldest_first(topo, g.level, g.begin, o, T, give, L, ws, b.quota);
    if (moved <= 0) {
      ws.frozen[o] = 1;
      continue;
    }
    if (moved < options.min_move &&
        !matches_previous(options, e, g.level, g.begin, topo.group_size(g.level))) {
      continue;
    }
    b.quota[o] = mass - moved;
    commit_broadcast(topo, e, o, g.level, g.begin, ws, L, b);
    ++ws.send_used[o];
    L[o] -= moved;
    ++num_broadcasts;
  }
  plan.broadcasts.resize(num_broadcasts);
}

}  // namespace iser
