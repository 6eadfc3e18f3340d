// Internal to the planner: the part of placement shared by HALO-Q and iser.
#pragma once

#include <cstdint>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/planner.h"
#include "iser/topology.h"

namespace iser {

// Checks the counts (shape, no negative count, total <= kMaxPlannerRoutes), then writes ws.hist,
// plan.{num_ranks, num_experts, num_slots, target, loads = home loads}; returns T.
int32_t prepare_loads(const Topology& topo, const CountMatrix& counts, PlannerWorkspace& ws,
                      Plan& plan);

// The `count` home experts of `owner` with the most routes (hist), ties to the smaller expert
// id, in that order into top[0 .. count) (1 <= count <= min(H, kMaxTopHomeExperts)).
inline constexpr int kMaxTopHomeExperts = kMaxSlots + 8;
void top_home_experts(const Topology& topo, int owner, int count, const std::vector<int32_t>& hist,
                      int32_t* top);

// The room-aware placement's expert choice (iser.cpp). ws.home_order holds, per owner, the
// home_order_size(topo) = min(H, S + kHomeOrderExtra) home experts with the most routes (by hist,
// ties: the smaller id), filled on the owner's first pass: a few more than it can export, so that
// spent experts rarely push the choice past the list. order_home_experts empties the lists
// (after prepare_loads, before a placement). next_expert returns owner o's home expert x with the
// most routes still at home (share[x] = ws.candidates[x]), not spent (ws.next_candidate[x] == 0)
// and share[x] > 0, ties to the smaller id; -1 when none. share <= hist, so the walk down the
// list stops once hist falls below the best share found; past the list it is decided only when
// that share exceeds every other home expert's hist, and otherwise every home expert is scanned.
inline constexpr int kHomeOrderExtra = 4;
int home_order_size(const Topology& topo);
void order_home_experts(const Topology& topo, PlannerWorkspace& ws);
int next_expert(const Topology& topo, PlannerWorkspace& ws, int o);

// True if options.previous holds a broadcast of `expert` on the same level and group: a new one
// there would be resident (no bytes move), so min_move does not apply to it.
bool matches_previous(const HaloQOptions& options, int32_t expert, int32_t level,
                      int32_t group_begin, int32_t group_size);

// The quota fill of a placement step (§4.2): the members of the aligned group (level,
// group_begin) other than the owner, coldest first by `loads` before this step (ties: lower rank),
// each take min(water - load, remaining) until `give` is used up. Writes `quota` (P entries, the
// owner's left 0) and returns the routes moved. Uses ws.members as scratch.
int32_t fill_quotas_coldest_first(const Topology& topo, int32_t level, int32_t group_begin,
                                  int32_t owner, int32_t water, int32_t give,
                                  const std::vector<int32_t>& loads, PlannerWorkspace& ws,
                                  std::vector<int32_t>& quota);

// Commits a placed broadcast: its fields (owner-direct, helper 0 until coloring, not resident),
// one received slot on every member, and the members' quotas added to their loads (the owner's
// load is the caller's: HALO-Q and iser account for it differently).
void commit_broadcast(const Topology& topo, int32_t expert, int32_t owner, int32_t level,
                      int32_t group_begin, PlannerWorkspace& ws, std::vector<int32_t>& loads,
                      Broadcast& b);

// Water level of each LSA team into ws.team_water: the level a team can reach, max(target,
// ceil(team's home routes / team size)), plus level / slack_divisor when slack_divisor > 0.
// Replicas never leave a team, so a hot team cannot get below its own mean; with one team
// every entry is target (+ target / slack_divisor), the plain water level.
void team_water_levels(const Topology& topo, int32_t target, int32_t slack_divisor,
                       const std::vector<int32_t>& home_loads, PlannerWorkspace& ws);

// HALO-Q placement (§4.2) after prepare_loads: ws.hist and plan.{target, loads = home loads}
// must be set; appends the broadcasts to `plan`.
void place_prepared(const Topology& topo, const HaloQOptions& options, PlannerWorkspace& ws,
                    Plan& plan);

// iser's chain leveling of the kept placement (iser_chains.cpp): quotas move along shortest
// chains of hosts from the busiest rank to the least loaded reachable one, while the max load is
// above stop_at, for at most kIserChainSteps · P steps; groups, payloads and Σ quotas per expert
// stay, the max load never rises. Uses ws.order, members, recv_used, send_used, group_cold,
// group_room, next_candidate, candidates, repair and chain_experts as scratch.
void level_chains(const Topology& topo, int32_t stop_at, PlannerWorkspace& ws, Plan& plan);

// iser's top-up exports of the kept placement (iser_top_up.cpp): while the busiest rank h is
// above stop_at and owns fewer than S broadcasts, its hottest home expert without a broadcast
// goes to the aligned group of its team (h outside, every member with a free helper slot) that
// absorbs the most up to the team's water level ws.team_water (slack 0), unless it moves fewer
// than options.min_move routes and would not be resident. With `relay`, where no such group
// absorbs anything, one relay broadcast (no routes moved) into the finest such group with the
// lowest first rank, after which it stops and returns true (false otherwise). The max load never
// rises. Uses ws.order, recv_used, send_used and members as scratch.
bool top_up_exports(const Topology& topo, const HaloQOptions& options, int32_t stop_at, bool relay,
                    PlannerWorkspace& ws, Plan& plan);

}  // namespace iser
