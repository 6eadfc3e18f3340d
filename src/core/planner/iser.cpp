// The `iser` policy's placement (docs/design.md §5): HALO-Q's multicast constraints with room-aware
// choices. Deterministic int32 logic only, so the GPU planner can run it.
//
// Kept from HALO-Q (what multicast needs): aligned groups; a broadcast is admitted only if every
// member has a free helper slot (so the coarse-to-fine coloring never fails); every byte of an
// expert leaves its owner once per broadcast; at most S broadcasts per owner per invocation;
// owners are served busiest first (ties: lowest rank); members take routes coldest first, each
// up to T.
//
// Changed (each addresses a stall of the reference under heavy skew):
//  1. Candidates: the owner's home expert with the largest *share still computed by the owner*
//     (hist minus what earlier broadcasts moved; ties: smaller id), over all H home experts, not
//     a fixed top-min(S, H) list. A very hot expert can therefore be exported again, to a group
//     disjoint from its earlier groups (the owner sends it once per broadcast; still <= S).
//  2. Level: no need-based starting level. For every level, the eligible group absorbing the
//     most, a = min(room, give) (ties: fewer cold members, whose receiving slots are the scarce
//     resource; then the lowest first rank); among levels, the finest one whose a reaches 7/8 of
//     the best a is taken. The 1/8 slack prices slots: a coarser group costs a helper slot on
//     every member, so it must absorb clearly more.
//  3. A candidate for which no group has room is marked spent (the owner tries its next one)
//     instead of freezing the owner; the owner freezes when it has no candidate or no export
//     left.
//  4. plan_iser keeps the best of up to six candidate placements (see there): this one, HALO-Q's,
//     and this one at water levels T + T/d for d = 256, 128, 64, 32, each tried only while the
//     best so far ends above it.
//  5. Each candidate is leveled before the comparison (level_quotas): its quotas move within its
//     groups from the busiest rank to colder hosts of the same broadcast, which the coldest-first
//     fill to the water level leaves far apart. The kept one is then leveled along chains of
//     hosts (level_chains, iser_chains.cpp), where one hop stalls, and topped up.
//  6. Still above T + T/256 after top-up: relay rounds (iser_top_up.cpp): a relay broadcast into
//     a group with free helper slots but no room of its own, through whose members the chains
//     carry the busiest rank's routes on; removed when the chains leave it unused.
//  7. Where that plan still ends above T + T/256: two breadth-first candidates (owners with the
//     fewest broadcasts first), finished the same way, each kept only when strictly better.
//  8. Still above it: the finest ladder, room-aware placements on the finest groups only at
//     water levels from the slot budget's bound up toward the best max load, finished the same
//     way, each kept only when strictly better (where every helper slot is needed); then its
//     upper two rungs with the first broadcast in the second-choice group.
// Quota bookkeeping for an expert broadcast k times: the owner's remaining share sits in the
// latest broadcast of that expert (earlier ones then hold 0 for the owner); members of each
// broadcast hold what they took. Σ quotas = hist[e] per expert.
#include <algorithm>
#include <functional>

#include "iser/error.h"
#include "iser/planner.h"
#include "planner/placement_common.h"

namespace iser {
namespace {

struct Choice {
  int level = -1;
  int begin = 0;
  int32_t room = 0;
};

// True if [begin, begin + size) meets a group of an earlier broadcast of `expert`.
bool overlaps_earlier(const Plan& plan, size_t num_broadcasts, int32_t expert, int begin,
                      int size) {
  for (size_t i = 0; i < num_broadcasts; ++i) {
    const Broadcast& b = plan.broadcasts[i];
    if (b.expert == expert && begin < b.group_begin + b.group_size &&
        b.group_begin < begin + size) {
      return true;
    }
  }
  return false;
}

// Room, cold members and eligibility of every aligned group, for the current loads: the finest
// groups are scanned once and coarser groups add up their two halves (aligned groups nest).
// Layout: with t LSA teams, level l's t·2^l groups start at index t·(2^l − 1) (t = 1: 2^l − 1),
// in rank order, so group g of level l has children 2g and 2g + 1 at level l + 1. The owner
// (above W) adds no room and is not cold, so no group needs to exclude it explicitly.
void tally_groups(const Topology& topo, const std::vector<int32_t>& loads, PlannerWorkspace& ws) {
  const int finest = topo.num_levels() - 1;
  const int size = topo.group_size(finest);
  const int num_finest = topo.num_groups(finest);
  const int S = topo.num_slots;
  const int num_teams = topo.num_teams();
  const size_t entries = 2 * static_cast<size_t>(num_finest) - num_teams;
  ws.group_room.resize(entries);
  ws.group_cold.resize(entries);
  const int groups_per_team = num_finest / num_teams;
  for (int g = 0; g < num_finest; ++g) {
    int32_t room = 0;
    int32_t cold = 0;
    bool eligible = true;
    const int32_t water = ws.team_water[num_teams == 1 ? 0 : g / groups_per_team];
    for (int m = g * size; m < (g + 1) * size; ++m) {
      eligible = eligible && ws.recv_used[m] < S;
      if (loads[m] < water) {
        room += water - loads[m];
        ++cold;
      }
    }
    // NOTE: cold = -1 marks an ineligible group (some member has no free helper slot).
    ws.group_room[num_finest - num_teams + g] = room;
    ws.group_cold[num_finest - num_teams + g] = eligible ? cold : -1;
  }
  for (int level = finest - 1; level >= 0; --level) {
    const int first = topo.num_groups(level) - num_teams;
    const int child = topo.num_groups(level + 1) - num_teams;
    for (int g = 0; g < topo.num_groups(level); ++g) {
      const int32_t cold_a = ws.group_cold[child + 2 * g];
      const int32_t cold_b = ws.group_cold[child + 2 * g + 1];
      ws.group_room[first + g] = ws.group_room[child + 2 * g] + ws.group_room[child + 2 * g + 1];
      ws.group_cold[first + g] = cold_a < 0 || cold_b < 0 ? -1 : cold_a + cold_b;
    }
  }
}

// The eligible group of `level` that absorbs the most of `give` (min(room, give)); ties: fewer
// cold members (each burns a scarce receiving slot), then the lowest first rank. Groups meeting
// an earlier group of the same expert are skipped, and so is `left_out` (its level and first
// rank; level -1: none). Only groups of the owner's LSA team count.
Choice best_group_at(const Topology& topo, int level, int owner, int32_t give,
                     const PlannerWorkspace& ws, const Plan& plan, size_t num_broadcasts,
                     int32_t expert, bool exported, const Choice& left_out) {
  const int size = topo.group_size(level);
  const int first = topo.num_groups(level) - topo.num_teams();
  Choice best{level, 0, -1};
  int32_t best_absorbed = 0;
  int32_t best_cold = 0;
  const int g_first = topo.first_group_of_team(level, owner);
  for (int g = g_first; g < g_first + topo.groups_per_team(level); ++g) {
    const int32_t room = ws.group_room[first + g];
    const int32_t cold = ws.group_cold[first + g];
    if (cold < 0 || room <= 0) continue;
    const int32_t absorbed = std::min(room, give);
    if (absorbed < best_absorbed || (absorbed == best_absorbed && cold >= best_cold)) continue;
    if (exported && overlaps_earlier(plan, num_broadcasts, expert, g * size, size)) continue;
    if (level == left_out.level && g * size == left_out.begin) continue;
    best = {level, g * size, room};
    best_absorbed = absorbed;
    best_cold = cold;
  }
  return best;
}

// The group of a room-aware pass (tally_groups first): per level from min_level, the group
// best_group_at picks (leaving `left_out` out); among levels, the finest one absorbing >= 7/8 of
// the best level's amount. The 1/8 slack prices slots: a coarser group costs a helper slot on
// every member, so it must absorb clearly more. Level -1: no eligible group has room.
Choice choose_group(const Topology& topo, int min_level, int owner, int32_t give,
                    const PlannerWorkspace& ws, const Plan& plan, size_t num_broadcasts,
                    int32_t expert, bool exported, const Choice& left_out = {}) {
  Choice per_level[32];
  int32_t best_absorbed = 0;
  const int num_levels = topo.num_levels();
  for (int level = min_level; level < num_levels; ++level) {
    per_level[level] = best_group_at(topo, level, owner, give, ws, plan, num_broadcasts, expert,
                                     exported, left_out);
    best_absorbed = std::max(best_absorbed, std::min(per_level[level].room, give));
  }
  if (best_absorbed <= 0) return {};
  for (int level = num_levels - 1; level >= min_level; --level) {
    const int32_t absorbed = std::min(per_level[level].room, give);
    if (absorbed > 0 && int64_t{absorbed} * 8 >= int64_t{best_absorbed} * 7) {
      return per_level[level];
    }
  }
  return {};  // not reached: the best level itself qualifies
}

}  // namespace

int home_order_size(const Topology& topo) {
  return std::min(topo.experts_per_rank(), topo.num_slots + kHomeOrderExtra);
}

void order_home_experts(const Topology& topo, PlannerWorkspace& ws) {
  ws.home_order.assign(static_cast<size_t>(topo.num_ranks) * home_order_size(topo), -1);
}

int next_expert(const Topology& topo, PlannerWorkspace& ws, int o) {
  const int H = topo.experts_per_rank();
  const int K = home_order_size(topo);
  const std::vector<int32_t>& share = ws.candidates;
  const std::vector<int32_t>& spent = ws.next_candidate;
  auto better = [&](int x, int e) {
    return !spent[x] && share[x] > 0 &&
           (e < 0 || share[x] > share[e] || (share[x] == share[e] && x < e));
  };
  int32_t* top = ws.home_order.data() + static_cast<size_t>(o) * K;
  if (top[0] < 0) top_home_experts(topo, o, K, ws.hist, top);
  int e = -1;
  for (int i = 0; i < K; ++i) {
    const int x = top[i];
    if (e >= 0 && ws.hist[x] < share[e]) return e;
    if (better(x, e)) e = x;
  }
  if (K == H || (e >= 0 && share[e] > ws.hist[top[K - 1]])) return e;
  e = -1;
  for (int x = o * H; x < (o + 1) * H; ++x) {
    if (better(x, e)) e = x;
  }
  return e;
}

namespace {

// The room-aware placement with water level W = T + slack (plan.target stays T; per LSA team, see
// team_water_levels), raised to water_floor: owners above W export, members fill up to W. Owner
// order: the busiest first (ties: the lowest rank); breadth-first: the fewest broadcasts sent so
// far first, then the busiest, then the lowest rank, so every owner above W gets a broadcast
// before any gets a second (plan_iser's breadth-first candidates). finest_only: only the finest
// level's groups are searched (plan_iser's finest ladder). second_choice: until the first
// broadcast is placed, a pass takes the group chosen with the rule's own choice left out, where
// one has room (plan_iser's second-choice rungs).
void place_room_aware(const Topology& topo, const HaloQOptions& options, int32_t slack_divisor,
                      bool breadth_first, PlannerWorkspace& ws, Plan& plan, int32_t water_floor = 0,
                      bool finest_only = false, bool second_choice = false) {
  const int32_t target = plan.target;
  const int P = topo.num_ranks;
  const int H = topo.experts_per_rank();
  const int S = topo.num_slots;
  std::vector<int32_t>& L = plan.loads;
  // W per LSA team (team_water_levels): T + T/d with one team.
  team_water_levels(topo, target, slack_divisor, L, ws);
  for (int32_t& w : ws.team_water) w = std::max(w, water_floor);

  // share[e]: routes of e the owner still computes; spent[e]: no group had room for e.
  std::vector<int32_t>& share = ws.candidates;
  share.assign(ws.hist.begin(), ws.hist.end());
  std::vector<int32_t>& latest = ws.order;  // latest broadcast of each expert, -1 = none
  latest.assign(topo.num_experts, -1);
  ws.recv_used.assign(P, 0);
  ws.send_used.assign(P, 0);
  ws.frozen.assign(P, 0);
  ws.next_candidate.assign(topo.num_experts, 0);  // spent flags per expert
  ws.members.resize(P);

  size_t num_broadcasts = 0;
  const int num_levels = topo.num_levels();
  const int min_level = finest_only ? num_levels - 1 : 0;
  const int64_t max_passes = static_cast<int64_t>(P) * (H + S + 1) + 1;
  const int num_teams = topo.num_teams();  // the water level's index below: no division with one
  const int team_size = topo.team_size();
  for (int64_t pass = 0; pass < max_passes; ++pass) {
    int o = -1;
    for (int r = 0; r < P; ++r) {
      if (ws.frozen[r] || L[r] <= ws.team_water[num_teams == 1 ? 0 : r / team_size]) continue;
      if (o < 0) {
        o = r;
      } else if (breadth_first && ws.send_used[r] != ws.send_used[o]) {
        if (ws.send_used[r] < ws.send_used[o]) o = r;
      } else if (L[r] > L[o]) {
        o = r;
      }
    }
    if (o < 0) break;
    const int32_t T = ws.team_water[topo.team_of(o)];
    if (ws.send_used[o] >= S) {
      ws.frozen[o] = 1;
      continue;
    }
    const int e = next_expert(topo, ws, o);
    if (e < 0) {
      ws.frozen[o] = 1;
      continue;
    }
    const int32_t give = std::min(L[o] - T, share[e]);

    tally_groups(topo, L, ws);
    Choice g = choose_group(topo, min_level, o, give, ws, plan, num_broadcasts, e, latest[e] >= 0);
    if (g.level < 0) {
      // NOTE: for an expert not exported yet, no eligible group of any level has room, and that
      // holds for every other candidate of o as well (only an exported expert's own groups are
      // skipped): the passes that would spend them one by one change nothing else, and then
      // freeze o. Freezing o now is the same placement, without those passes.
      if (latest[e] < 0) ws.frozen[o] = 1;
      ws.next_candidate[e] = 1;
      continue;
    }
    if (second_choice && num_broadcasts == 0) {
      // The first broadcast takes the group chosen with the rule's own choice left out, where
      // one has room (plan_iser's second-choice rungs).
      const Choice other =
          choose_group(topo, min_level, o, give, ws, plan, num_broadcasts, e, latest[e] >= 0, g);
      if (other.level >= 0) g = other;
    }

    const int size = topo.group_size(g.level);
    if (plan.broadcasts.size() <= num_broadcasts) plan.broadcasts.emplace_back();
    Broadcast& b = plan.broadcasts[num_broadcasts];
    const int32_t moved =
        fill_quotas_coldest_first(topo, g.level, g.begin, o, T, give, L, ws, b.quota);
    if (moved <= 0 ||
        (moved < options.min_move && !matches_previous(options, e, g.level, g.begin, size))) {
      ws.next_candidate[e] = 1;
      continue;
    }
    share[e] -= moved;
    if (latest[e] >= 0) plan.broadcasts[latest[e]].quota[o] = 0;
    b.quota[o] = share[e];
    latest[e] = static_cast<int32_t>(num_broadcasts);
    commit_broadcast(topo, e, o, g.level, g.begin, ws, L, b);
    ++ws.send_used[o];
    L[o] -= moved;
    ++num_broadcasts;
  }
  plan.broadcasts.resize(num_broadcasts);
}

}  // namespace

void place_iser(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
                PlannerWorkspace& ws, Plan& plan, int32_t slack_divisor) {
  prepare_loads(topo, counts, ws, plan);
  order_home_experts(topo, ws);
  place_room_aware(topo, options, slack_divisor, false, ws, plan);
}

namespace {

int32_t max_load(const Plan& plan) {
  int32_t m = 0;
  for (const int32_t l : plan.loads) m = std::max(m, l);
  return m;
}

int32_t remote_copies(const Plan& plan) {
  int32_t n = 0;
  for (const Broadcast& b : plan.broadcasts) n += b.remote_copies();
  return n;
}

// Leveling of one candidate placement: its groups stay, its quotas move. A broadcast's hosts
// are the members of its group other than the owner, and the owner when the broadcast holds the
// owner's share (the expert's latest broadcast; earlier ones keep 0 for the owner). Each step
// takes the busiest rank h (ties: the lowest rank) and, among the broadcasts where h holds quota,
// the one whose least loaded other host r (ties: the lowest rank) is furthest below h (ties: the
// earlier broadcast); it moves min(q[h], (L[h] − L[r]) / 2) routes from h to r. It stops when no
// such host is at least 2 below h (the max load cannot drop by moving one of h's routes within a
// group) or after kIserLevelSteps steps. Each step leaves L[h] ≥ L[r], so no load rises above the
// old max: the max load never grows, and the remote copies (group sizes) stay.
// NOTE: the greedy fill gives the coldest members all they can take up to the water level and
// the rest nothing, so a group's members end far apart; leveling evens them out, which lowers
// the max load wherever the busiest rank shares a group with colder ones.
void level_quotas(const Topology& topo, PlannerWorkspace& ws, Plan& plan) {
  const int P = topo.num_ranks;
  const int num_broadcasts = static_cast<int>(plan.broadcasts.size());
  std::vector<int32_t>& L = plan.loads;
  std::vector<int32_t>& latest = ws.order;  // latest broadcast of each expert
  latest.assign(topo.num_experts, -1);
  for (int b = 0; b < num_broadcasts; ++b) latest[plan.broadcasts[b].expert] = b;
  auto hosts = [&](int b, int r) {
    const Broadcast& x = plan.broadcasts[b];
    return r == x.owner ? latest[x.expert] == b
                        : r >= x.group_begin && r < x.group_begin + x.group_size;
  };
  const int max_steps = kIserLevelSteps * P;
  for (int step = 0; step < max_steps; ++step) {
    int h = 0;
    for (int r = 1; r < P; ++r) {
      if (L[r] > L[h]) h = r;
    }
    int best_b = -1;
    int best_r = -1;
    int32_t best_gap = 1;  // a move needs L[h] − L[r] >= 2
    for (int b = 0; b < num_broadcasts; ++b) {
      const Broadcast& x = plan.broadcasts[b];
      if (x.quota[h] <= 0 || !hosts(b, h)) continue;
      int r = -1;
      if (x.owner != h && hosts(b, x.owner)) r = x.owner;
      for (int m = x.group_begin; m < x.group_begin + x.group_size; ++m) {
        if (m != h && m != x.owner && (r < 0 || L[m] < L[r] || (L[m] == L[r] && m < r))) r = m;
      }
      if (r >= 0 && L[h] - L[r] > best_gap) {
        best_b = b;
        best_r = r;
        best_gap = L[h] - L[r];
      }
    }
    if (best_b < 0) break;
    std::vector<int32_t>& q = plan.broadcasts[best_b].quota;
    const int32_t moved = std::min(q[h], best_gap / 2);
    q[h] -= moved;
    q[best_r] += moved;
    L[h] -= moved;
    L[best_r] += moved;
  }
}

// True when broadcast b's group members hold no quota (b moves nothing: its owner keeps all).
bool moves_nothing(const Broadcast& b) {
  for (int m = b.group_begin; m < b.group_begin + b.group_size; ++m) {
    if (m != b.owner && b.quota[m] > 0) return false;
  }
  return true;
}

// The kept placement's finish (options.iser_chains): chain leveling, top-up exports and, when
// they added a broadcast, the chains again; each only while the max load is above stop_at.
// Then (options.iser_relay) relay rounds: top-up exports that may end with a relay broadcast,
// each followed by the chains; a round that adds nothing or no relay broadcast ends them, and a
// relay broadcast the chains did not use (its members hold no quota) is removed and ends them.
// NOTE: the relay rounds start from the plan the finish without them ends with, and neither a
// relay broadcast (it moves nothing) nor the chains raise the max load: they never end higher.
// Each kept round adds a broadcast and an owner sends at most S: at most P · S rounds.
void finish_candidate(const Topology& topo, const HaloQOptions& options, int32_t stop_at,
                      PlannerWorkspace& ws, Plan& plan) {
  if (!options.iser_chains) return;
  level_chains(topo, stop_at, ws, plan);
  team_water_levels(topo, plan.target, 0, ws.home_loads, ws);
  const size_t num_placed = plan.broadcasts.size();
  top_up_exports(topo, options, stop_at, /*relay=*/false, ws, plan);
  if (plan.broadcasts.size() > num_placed) level_chains(topo, stop_at, ws, plan);
  if (!options.iser_relay) return;
  for (int round = 0; round < topo.num_ranks * topo.num_slots; ++round) {
    const size_t num_before = plan.broadcasts.size();
    const bool relayed = top_up_exports(topo, options, stop_at, /*relay=*/true, ws, plan);
    if (plan.broadcasts.size() == num_before) return;
    level_chains(topo, stop_at, ws, plan);
    if (!relayed) return;
    if (moves_nothing(plan.broadcasts.back())) {
      // NOTE: its owner holds all hist[e] routes of it, as when e stayed home: loads unchanged.
      plan.broadcasts.pop_back();
      return;
    }
  }
}

// The slot budget's water level: a broadcast takes a helper slot on each of its >= g members (g:
// the finest group size), so at most B = team size · S / g owners of a team export, and the
// (B + 1)-th busiest owner of the team keeps its home load or more. The highest such load over
// the teams (0 when every rank of a team can export), a lower bound on any plan's max load.
int32_t slot_budget_water(const Topology& topo, PlannerWorkspace& ws) {
  const int size = topo.team_size();
  const int budget = size * topo.num_slots / topo.group_size(topo.num_levels() - 1);
  if (budget >= size) return 0;
  std::vector<int32_t>& team = ws.members;  // scratch
  int32_t out = 0;
  for (int t = 0; t < topo.num_teams(); ++t) {
    team.assign(ws.home_loads.begin() + t * size, ws.home_loads.begin() + (t + 1) * size);
    std::nth_element(team.begin(), team.begin() + budget, team.end(), std::greater<>());
    out = std::max(out, team[budget]);
  }
  return out;
}

// True when the plan's helper slots are nearly spent: at most an eighth of them free (in some
// team, with LSA teams). Only then can the finest ladder's candidates put slots where the plan
// has none left; where more are free, top-up and the relay rounds have had them.
bool slots_nearly_spent(const Topology& topo, const Plan& plan) {
  const int32_t slots = topo.team_size() * topo.num_slots;
  std::vector<int32_t> used(topo.num_teams(), 0);
  for (const Broadcast& b : plan.broadcasts) used[topo.team_of(b.group_begin)] += b.group_size;
  for (const int32_t u : used) {
    if ((slots - u) * kIserFinestLadderFreeDivisor <= slots) return true;
  }
  return false;
}

}  // namespace

void plan_iser(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
               PlannerWorkspace& ws, Plan& plan) {
  // Candidate placements, the best one kept (lowest max load; ties: fewer remote copies; ties:
  // the earlier candidate):
  //  1. the room-aware placement with water level T;
  //  2. HALO-Q's placement (wins on some mild workloads, where its need-based levels spread hot
  //     experts wider), so iser is never worse than halo-q in max load;
  //  3. for each slack divisor d of the ladder in turn (256, 128, 64, 32; planner.h), only when the
  //     best so far ends above T + T/d (T: the highest team water level with LSA teams): the
  //     room-aware placement with water level T + T/d. Members may then exceed T by up to 1/d,
  //     which lets one broadcast absorb a whole give where slots are scarce (S = 2 under heavy
  //     skew, or EP64 with four home experts per rank); the finest slack that works wins, and a
  //     coarser one runs only where the finer ones failed.
  // Each candidate is leveled (level_quotas) before it is compared; the kept one is then leveled
  // along chains of hosts (level_chains).
  // Counts are checked and hist / home loads computed once; each candidate starts from them.
  prepare_loads(topo, counts, ws, plan);
  order_home_experts(topo, ws);
  ws.home_loads = plan.loads;
  // The level the ladder compares with: T, or with LSA teams the highest team water level (a hot
  // team cannot get below its own mean, so T alone would run every ladder step there).
  team_water_levels(topo, plan.target, 0, plan.loads, ws);
  const int32_t reachable = *std::max_element(ws.team_water.begin(), ws.team_water.end());
  auto start_alternative = [&] {
    ws.alternative.num_ranks = plan.num_ranks;
    ws.alternative.num_experts = plan.num_experts;
    ws.alternative.num_slots = plan.num_slots;
    ws.alternative.target = plan.target;
    ws.alternative.loads = ws.home_loads;
  };
  place_room_aware(topo, options, 0, false, ws, plan);
  level_quotas(topo, ws, plan);
  HaloQOptions reference = options;
  reference.absorb = false;
  reference.owner_in_group = false;
  start_alternative();
  place_prepared(topo, reference, ws, ws.alternative);
  level_quotas(topo, ws, ws.alternative);
  auto keep_better = [&] {
    const int32_t max_kept = max_load(plan);
    const int32_t max_new = max_load(ws.alternative);
    if (max_new < max_kept ||
        (max_new == max_kept && remote_copies(ws.alternative) < remote_copies(plan))) {
      std::swap(plan.broadcasts, ws.alternative.broadcasts);
      std::swap(plan.loads, ws.alternative.loads);
    }
  };
  keep_better();
  for (int32_t divisor = kIserSlackDivisorFinest; divisor >= kIserSlackDivisorCoarsest;
       divisor /= 2) {
    if (max_load(plan) > reachable + reachable / divisor) {
      start_alternative();
      place_room_aware(topo, options, divisor, false, ws, ws.alternative);
      level_quotas(topo, ws, ws.alternative);
      keep_better();
    }
  }
  // The kept placement only: its quotas move along chains of hosts (level_chains), where one
  // hop stalls, while its max load is above the ladder's finest level (below it, the few routes
  // left to gain cost the GPU planner chain steps on most real inputs: docs/design.md §5).
  // Then, still above that level, a busiest rank that exports too little gets one more broadcast
  // of a home expert into leftover helper slots (top_up_exports), and the chains run again; then
  // the relay rounds (finish_candidate).
  const int32_t stop_at = reachable + reachable / kIserSlackDivisorFinest;
  finish_candidate(topo, options, stop_at, ws, plan);
  // Still above that level: the breadth-first candidates (water level T, then T + T/d for the
  // ladder's coarsest d), each finished as above and kept only when strictly better, each run
  // only while the best plan so far ends above stop_at. Busiest-first serves the hottest owners
  // until the helper slots run out and can leave an owner just above the water with none (at
  // S = 2 under heavy skew: docs/evaluation.md); breadth-first gives every owner above the water
  // its first broadcast before any gets a second. Compared after finishing, not before: chains
  // and top-up exports change the order of the candidates (docs/design.md §5).
  if (options.iser_breadth_first) {
    for (const int32_t divisor : {0, kIserSlackDivisorCoarsest}) {
      if (max_load(plan) <= stop_at) break;
      start_alternative();
      place_room_aware(topo, options, divisor, true, ws, ws.alternative);
      level_quotas(topo, ws, ws.alternative);
      finish_candidate(topo, options, stop_at, ws, ws.alternative);
      keep_better();
    }
  }
  // Still above that level with its helper slots nearly spent (slots_nearly_spent): the finest
  // ladder (options.iser_finest_ladder). Where slots are scarce (S = 2 at EP72), a broadcast to
  // a coarser group spends the slots of two or more finest groups, and the water level T leaves
  // owners that no plan can bring down to it holding slots that a busier owner needs. These
  // candidates use the finest groups only, at kIserFinestLadderSteps water levels W_j = F +
  // (M − F) · j / steps, from F = max(reachable, the slot budget's water level) toward M, the
  // best plan's max load so far (both fixed before the first): owners at or below W_j export
  // nothing. Each is finished as above and kept only when strictly better.
  // Then (options.iser_second_choice), while the best plan so far ends above both stop_at and
  // the lowest water level (the slot budget's bound, below which no plan gets), the upper
  // kIserSecondChoiceRungs rungs again (where the second choice won most on the skew families;
  // all four cost 2.1x the planner instructions of main 4960c43 at heavy skew, EP8, issue #26's
  // limit is 2x), each with its first broadcast in the group chosen with the rule's own choice
  // left out: the first broadcast is the busiest owner's largest give, and where no finest group
  // can absorb all of it, the roomiest one and one nearly as roomy lead to different plans; which
  // is better shows only after the later broadcasts (on the skew families at EP16 and EP72 it is
  // now one, now the other: docs/evaluation.md). Checked once, before the first of them (the
  // GPU planner runs them at once).
  if (options.iser_finest_ladder && max_load(plan) > stop_at && slots_nearly_spent(topo, plan)) {
    const int32_t lowest = std::max(reachable, slot_budget_water(topo, ws));
    const int32_t top = max_load(plan);
    for (const bool second_choice : {false, true}) {
      if (second_choice &&
          (!options.iser_second_choice || max_load(plan) <= std::max(lowest, stop_at))) {
        break;
      }
      const int first = second_choice ? kIserFinestLadderSteps - kIserSecondChoiceRungs : 0;
      for (int j = first; j < kIserFinestLadderSteps && lowest < top; ++j) {
        const int32_t water =
            lowest + static_cast<int32_t>(int64_t{top - lowest} * j / kIserFinestLadderSteps);
        start_alternative();
        place_room_aware(topo, options, 0, false, ws, ws.alternative, water, /*finest_only=*/true,
                         second_choice);
        level_quotas(topo, ws, ws.alternative);
        finish_candidate(topo, options, stop_at, ws, ws.alternative);
        keep_better();
      }
    }
  }
  // The owner serves its quota from its home slot: with an expert in two groups the owner may
  // be a member of one, and the home slot needs no READY wait.
  plan.owner_uses_home_slot = true;
  color_slots(topo, plan, ws, options.previous);
  repair_quotas(topo, counts, plan, ws);
  assign_transport(topo, plan);
}

Plan plan_iser(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options) {
  PlannerWorkspace ws;
  Plan plan;
  plan_iser(topo, counts, options, ws, plan);
  return plan;
}

}  // namespace iser
