// Host-side routing maps of one EP rank for one invocation (the reference EP MoE layer): where
// each of the rank's routes is sent, what the rank receives from every source and in which of
// its slots, and the permutations between the wire order and the expert (slot-major) order.
// Pure host code: built from the plan every rank derives from the same all-gathered counts, so
// no sizes travel over the network, and tested without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser::moe {

struct RoutingMaps {
  // Send side, wire order: this rank's routes sorted by global slot (destination rank major,
  // then local slot, then token and choice). The combine receives the outputs back in it.
  std::vector<int32_t> send_gather;           // wire row -> local token
  std::vector<int32_t> route_row;             // route t*k + j -> wire row (-1: no expert)
  std::vector<int64_t> send_off, send_count;  // [P] rows to each destination
  // Receive side: source s sends its rows for my slots in local-slot order.
  std::vector<int64_t> recv_off, recv_count;  // [P] rows from each source
  std::vector<int64_t> recv_slot;             // [P][H+S] rows from source s into slot l
  std::vector<int32_t> rows_per_slot;         // [H+S] expert rows per local slot
  std::vector<int32_t> expert_gather;         // expert row (slot, source, route) -> recv row
  std::vector<int32_t> back_gather;           // recv row -> expert row
  int64_t total_recv = 0;
};

// Local slot of `rank_idx` that computes its routes of `expert` under `plan` (docs/design.md §4.5):
// the helper slot of the expert's broadcast when the rank is in its group (the owner too, unless
// plan.owner_uses_home_slot), else the home slot, which must then be the rank's own expert.
int local_slot_of(const Topology& topo, const Plan& plan, int expert, int rank_idx);

// topk_ids: this rank's [tau * k] ids (-1 = none). Throws iser::Error when the token-level
// rewrite of this rank disagrees with the count-level flows its peers derive (an internal error
// that would otherwise mismatch NCCL sizes).
RoutingMaps build_routing_maps(const Topology& topo, const CountMatrix& counts, const Plan& plan,
                               int rank_idx, std::span<const int32_t> topk_ids, int top_k);

}  // namespace iser::moe
