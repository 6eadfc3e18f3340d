// The plan of one layer invocation (docs/design.md §3-§4): which experts are broadcast into which
// helper slots of which group, and how many routes each host computes (quotas).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "iser/counts.h"
#include "iser/topology.h"

namespace iser {

// Who moves a broadcast's bytes: the one per-broadcast vocabulary of plans, copy lists
// (CopyOp::mode) and the replication kernels. Transport (runtime.h) is a different thing: the
// mechanism one replicate call uses, which may override every op's mode.
enum class TransportMode : std::int32_t {
  kOwnerDirect = 0,   // the owner (a group member) sends the whole bundle to the group
  kSami = 1,          // member i moves slices j = i (mod g) from the owner to the group
  kPointToPoint = 2,  // baselines: one payload per replica (a copy list makes it owner-direct)
  kSamiOwner = 3,     // copy lists only (Transport::kP2PSamiOwner): SAMI plus an owner outside
                      // the group as writer g of g + 1; no planner produces it
};
std::string_view to_string(TransportMode mode);

// Level of a broadcast whose group is not an aligned group (point-to-point baselines).
inline constexpr int kUnalignedLevel = -1;

struct Broadcast {
  int32_t expert = 0;
  int32_t owner = 0;
  int32_t level = 0;  // aligned level, or kUnalignedLevel
  int32_t group_begin = 0;
  int32_t group_size = 0;
  int32_t helper = 0;  // helper index h in [0, S): local slot H + h on every member
  TransportMode mode = TransportMode::kOwnerDirect;
  bool resident = false;       // replica kept from the previous invocation: moves no bytes
  std::vector<int32_t> quota;  // [P] routes of `expert` each rank computes (0 off the hosts)

  bool in_group(int rank_idx) const {
    return rank_idx >= group_begin && rank_idx < group_begin + group_size;
  }
  bool owner_in_group() const { return in_group(owner); }
  bool is_host(int rank_idx) const { return rank_idx == owner || in_group(rank_idx); }
  // Members that receive the bundle over a link: |G \ {o}|.
  int32_t remote_copies() const { return owner_in_group() ? group_size - 1 : group_size; }

  friend bool operator==(const Broadcast&, const Broadcast&) = default;
};

struct Plan {
  int32_t num_ranks = 0;
  int32_t num_experts = 0;
  int32_t num_slots = 0;
  int32_t target = 0;  // T = ceil(total routes / P)
  // Variant owner-home: an owner inside its group serves its quota from its home slot.
  bool owner_uses_home_slot = false;
  std::vector<int32_t> loads;         // [P] routes each rank computes after planning
  std::vector<Broadcast> broadcasts;  // plan order

  friend bool operator==(const Plan&, const Plan&) = default;
};

// A plan that moves nothing: loads are the home loads.
Plan make_empty_plan(const Topology& topo, const CountMatrix& counts);

// Routes of `expert` that `src_rank` sends to `dst_rank` (the compute host) after rewriting.
struct RouteFlow {
  int32_t src_rank = 0;
  int32_t expert = 0;
  int32_t dst_rank = 0;
  int32_t routes = 0;
  friend bool operator==(const RouteFlow&, const RouteFlow&) = default;
};

}  // namespace iser
