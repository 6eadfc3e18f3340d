// HALO-Q reference planner (docs/design.md §4) and its named variants (docs/design.md §5).
//
// The planner is the bit-exact oracle of the GPU planner: int32 arithmetic, deterministic ties,
// no hidden state (a previous plan, when a variant uses one, is an explicit argument). Each stage
// is a separate function so that tests and the GPU port can check them one by one:
//
//   place_broadcasts  (§4.2)  loads, groups and quotas, in placement order
//   color_slots       (§4.3)  helper index per broadcast (coarse to fine)
//   repair_quotas     (§4.4)  circle-method trades that keep every load
//   assign_transport  (§4.6)  owner-direct or SAMI per broadcast
//
// plan_halo_q runs them in that order. Plan order = placement order; Plan::loads are the loads
// after placement (repair keeps them); quotas are the quotas after repair.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser {

// Largest total number of routes (Σ c) one invocation may carry: every intermediate of the
// planner (room sums, T·P) then fits in int32, as on the GPU.
inline constexpr int32_t kMaxPlannerRoutes = (int32_t{1} << 30) - 1;

struct HaloQOptions {
  // owner-home: an owner inside its group serves its quota from its home slot. The placement is
  // unchanged (the multicast still writes the owner's helper slot, which it then leaves idle).
  bool owner_home = false;
  // absorb: a level finer than 0 is accepted only when its best group has room >= give; when no
  // level does, the group with the most room seen (ties: the finer level) is taken if room > 0.
  bool absorb = false;
  // halo-q-owner-in: only the owner's own aligned group is a candidate at each level.
  bool owner_in_group = false;
  // Skip (do not commit) a replication that would move fewer routes than this, unless it would
  // be resident (see `previous`); the owner's cursor has advanced, so it is not retried.
  int32_t min_move = 0;
  // resident: the previous invocation's plan of this layer. A broadcast whose expert, level and
  // group equal a broadcast of `previous` reuses that helper index when it is free on the whole
  // group at its turn of the coloring (Broadcast::resident = true: moves no bytes). Null: none.
  const Plan* previous = nullptr;
  // iser only: level the kept placement along chains of hosts and give its busiest rank top-up
  // exports (plan_iser; the GPU planner always does). Off only to measure what they add (tests,
  // ablations).
  bool iser_chains = true;
  // iser only: when the finished plan still ends above T + T/kIserSlackDivisorFinest, try the
  // breadth-first candidates (plan_iser; the GPU planner always does). Off only to measure what
  // they add (tests, ablations).
  bool iser_breadth_first = true;
  // iser only: where top-up finds no aligned group with room of its own, relay broadcasts into a
  // group with free helper slots, through whose members chain leveling carries the busiest rank's
  // routes on (plan_iser; the GPU planner always does). Off only to measure what they add (tests,
  // ablations).
  bool iser_relay = true;
  // iser only: when the finished plan still ends above T + T/kIserSlackDivisorFinest after the
  // breadth-first candidates, try the finest ladder (plan_iser; the GPU planner always does). Off
  // only to measure what it adds (tests, ablations).
  bool iser_finest_ladder = true;
  // iser only: the finest ladder runs its upper kIserSecondChoiceRungs rungs a second time, each
  // with its first broadcast in the group chosen with the rule's own choice left out (plan_iser;
  // the GPU planner always does). Off only to measure what it adds (tests, ablations).
  bool iser_second_choice = true;
};

// A policy of the HALO-Q family as planner settings: its HaloQOptions (min_move 0, previous
// null), whether it keeps the previous invocation's replicas (`resident`: the policy applies
// PolicyOptions::min_move and passes the previous plan) and whether it runs plan_iser.
struct HaloQVariant {
  HaloQOptions options;
  bool resident = false;
  bool iser = false;
};
// The one map from the family's policy names (halo-q, owner-home, absorb, resident,
// halo-q-owner-in, iser, iser-stateless) to their settings, read by the CPU policies and the GPU
// planner alike; nullopt for any other name.
std::optional<HaloQVariant> halo_q_variant(std::string_view policy);

// Reusable scratch memory of the planner: plan with the same workspace to avoid allocations in
// a hot loop. Holds no state between calls that influences results.
struct PlannerWorkspace {
  std::vector<int32_t> hist;            // [E]
  std::vector<int32_t> candidates;      // [P * C] top-C home experts per owner (iser: [E] share)
  std::vector<int32_t> recv_used;       // [P]
  std::vector<int32_t> send_used;       // [P]
  std::vector<int32_t> next_candidate;  // [P] cursors (iser: [E] spent flags)
  std::vector<uint8_t> frozen;          // [P]
  std::vector<int32_t> members;         // [P] members of the chosen group, coldest first
  std::vector<uint64_t> helper_mask;    // [P] helper indices in use (coloring)
  std::vector<int32_t> order;           // [B] broadcasts by (expert, plan index) (iser: [E])
  std::vector<int32_t> host_begin;      // [P + 1] CSR of broadcasts hosted per rank (repair)
  std::vector<int32_t> host_list;       // [Σ hosts]
  std::vector<uint64_t> host_bits;      // [P * ceil(B/64)] hosted broadcasts per rank (repair)
  std::vector<uint8_t> pair_shares;     // [P * P] 1: two ranks host >= 2 broadcasts (repair)
  std::vector<int32_t> group_room;      // iser: room per aligned group (all levels)
  std::vector<int32_t> group_cold;      // iser: cold members per group, -1 = ineligible
  std::vector<int32_t> home_loads;      // iser: home loads shared by its candidate placements
  std::vector<int32_t> home_order;      // iser: [P * K] busiest home experts per owner
  std::vector<int32_t> chain_experts;   // iser: [E] experts in the order chain leveling reaches
  std::vector<int32_t> team_water;      // [P / lsa_size] water level per LSA team
  Plan alternative;                     // iser: the candidate placement being compared
  std::vector<int32_t> repair;          // repair: own routes, quotas, spare counts, pairs
};

// ---- stages ----------------------------------------------------------------------------------

// §4.2 placement. Writes plan.{num_ranks, num_experts, num_slots, target, loads} and appends one
// broadcast per placed expert (expert, owner, level, group, quotas; helper = 0, mode unset).
// Throws iser::Error when counts do not match the topology, hold a negative count, or exceed
// kMaxPlannerRoutes.
void place_broadcasts(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
                      PlannerWorkspace& ws, Plan& plan);

// §4.3 coloring: levels coarse to fine, plan order within a level, smallest helper index free
// on every member. With `previous`, a broadcast matching a previous one (same expert, level and
// group) first claims its previous index, per level before the others (see HaloQOptions).
// Throws iser::Error (internal error) if a group has no common free index.
void color_slots(const Topology& topo, Plan& plan, PlannerWorkspace& ws,
                 const Plan* previous = nullptr);

// §4.4 quota repair: two rounds of the circle method over P ranks (P odd: P + 1 seats with a
// bye), each pair trading spare quota in both orders. Loads and quota sums are unchanged.
void repair_quotas(const Topology& topo, const CountMatrix& counts, Plan& plan,
                   PlannerWorkspace& ws);

// §4.6 transport mode of every broadcast of an aligned plan.
void assign_transport(const Topology& topo, Plan& plan);

// ---- whole planner ---------------------------------------------------------------------------

// The four stages in order into `plan` (cleared first; its vectors' memory is reused).
void plan_halo_q(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
                 PlannerWorkspace& ws, Plan& plan);
Plan plan_halo_q(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options = {});

// ---- iser policy (docs/design.md §5)
// --------------------------------------------------------------------

// Room-aware placement with HALO-Q's multicast constraints (see src/core/planner/iser.cpp): the
// owner's heaviest remaining share first, the finest level absorbing >= 7/8 of the best
// absorbable amount, an expert exported again to a disjoint group when still heavy, <= S
// broadcasts per owner. Uses owner_home semantics (Plan::owner_uses_home_slot = true);
// options.absorb / owner_in_group are ignored; min_move and previous apply as in HALO-Q. With
// slack_divisor d > 0 the water level is T + T/d (plan_iser's slack ladder), else T.
void place_iser(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
                PlannerWorkspace& ws, Plan& plan, int32_t slack_divisor = 0);
// plan_iser's slack ladder: candidate water levels T + T/d for d = finest, finest/2, ...,
// coarsest (the GPU planner walks the same ladder).
inline constexpr int kIserSlackDivisorFinest = 256;
inline constexpr int kIserSlackDivisorCoarsest = 32;
// Each candidate placement of plan_iser is leveled (its quotas moved within its groups) for at most
// kIserLevelSteps · P steps.
inline constexpr int kIserLevelSteps = 2;
// The kept placement is then leveled along chains of hosts (src/core/planner/iser_chains.cpp)
// while its max load is above T + T/kIserSlackDivisorFinest, for at most kIserChainSteps · P
// steps.
inline constexpr int kIserChainSteps = 1;
// Water levels of the finest ladder (plan_iser): candidates restricted to the finest aligned
// groups, for inputs whose helper slots run out (at most 1/kIserFinestLadderFreeDivisor of them
// free in the plan before it).
inline constexpr int kIserFinestLadderSteps = 4;
inline constexpr int kIserFinestLadderFreeDivisor = 8;
// The ladder's upper kIserSecondChoiceRungs water levels run a second time, with the first
// broadcast in the second-choice group (HaloQOptions::iser_second_choice).
inline constexpr int kIserSecondChoiceRungs = 2;
static_assert(kIserSecondChoiceRungs >= 1 && kIserSecondChoiceRungs <= kIserFinestLadderSteps);
void plan_iser(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options,
               PlannerWorkspace& ws, Plan& plan);
Plan plan_iser(const Topology& topo, const CountMatrix& counts, const HaloQOptions& options = {});

}  // namespace iser
