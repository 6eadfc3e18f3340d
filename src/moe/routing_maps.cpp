#include "moe/routing_maps.h"

#include "iser/error.h"
#include "iser/rewrite.h"

namespace iser::moe {

int local_slot_of(const Topology& topo, const Plan& plan, int expert, int rank_idx) {
  for (const Broadcast& b : plan.broadcasts) {
    if (b.expert != expert) continue;
    const bool home_owner = rank_idx == b.owner && plan.owner_uses_home_slot;
    if (b.in_group(rank_idx) && !home_owner) return topo.experts_per_rank() + b.helper;
  }
  ISER_CHECK(topo.owner_of(expert) == rank_idx,
             "routing maps: rank {} computes expert {} without a replica (internal error)",
             rank_idx, expert);
  return expert - topo.first_home_expert(rank_idx);
}

RoutingMaps build_routing_maps(const Topology& topo, const CountMatrix& counts, const Plan& plan,
                               int rank_idx, std::span<const int32_t> topk_ids, int top_k) {
  const int num_ranks = topo.num_ranks;
  const int per_rank = topo.slots_per_rank();
  const int64_t routes = static_cast<int64_t>(topk_ids.size());
  ISER_CHECK(top_k >= 1 && routes % top_k == 0, "routing maps: {} ids are not tokens x top-k {}",
             routes, top_k);
  RoutingMaps maps;

  // Send side: a stable counting sort of my routes by global slot.
  std::vector<int32_t> slot_ids(routes);
  rewrite_tokens(topo, counts, plan, rank_idx, topk_ids, top_k, slot_ids);
  std::vector<int64_t> slot_begin(static_cast<size_t>(topo.total_slots()) + 1, 0);
  for (int32_t slot : slot_ids) {
    if (slot >= 0) ++slot_begin[slot + 1];
  }
  const std::vector<int64_t> send_slot_count(slot_begin.begin() + 1, slot_begin.end());
  for (int g = 0; g < topo.total_slots(); ++g) slot_begin[g + 1] += slot_begin[g];
  maps.send_gather.assign(slot_begin.back(), 0);
  maps.route_row.assign(routes, -1);
  std::vector<int64_t> cursor(slot_begin.begin(), slot_begin.end() - 1);
  for (int64_t i = 0; i < routes; ++i) {
    if (slot_ids[i] < 0) continue;
    const int64_t row = cursor[slot_ids[i]]++;
    maps.route_row[i] = static_cast<int32_t>(row);
    maps.send_gather[row] = static_cast<int32_t>(i / top_k);
  }
  maps.send_off.resize(num_ranks);
  maps.send_count.resize(num_ranks);
  for (int d = 0; d < num_ranks; ++d) {
    maps.send_off[d] = slot_begin[static_cast<size_t>(d) * per_rank];
    maps.send_count[d] = slot_begin[static_cast<size_t>(d + 1) * per_rank] - maps.send_off[d];
  }

  // Receive side from the count-level rewrite, which every rank derives identically; my own
  // token-level sends must agree with what my peers derive for me.
  maps.recv_slot.assign(static_cast<size_t>(num_ranks) * per_rank, 0);
  std::vector<int64_t> derived_send(static_cast<size_t>(topo.total_slots()), 0);
  for (const RouteFlow& flow : rewrite_flows(topo, counts, plan)) {
    const int l = local_slot_of(topo, plan, flow.expert, flow.dst_rank);
    if (flow.dst_rank == rank_idx) {
      maps.recv_slot[static_cast<size_t>(flow.src_rank) * per_rank + l] += flow.routes;
    }
    if (flow.src_rank == rank_idx) derived_send[topo.global_slot(flow.dst_rank, l)] += flow.routes;
  }
  ISER_CHECK(derived_send == send_slot_count,
             "routing maps: rank {}: token-level rewrite disagrees with the count-level flows "
             "(internal error)",
             rank_idx);
  maps.recv_off.resize(num_ranks);
  maps.recv_count.assign(num_ranks, 0);
  maps.rows_per_slot.assign(per_rank, 0);
  for (int src = 0; src < num_ranks; ++src) {
    maps.recv_off[src] = maps.total_recv;
    for (int l = 0; l < per_rank; ++l) {
      const int64_t rows = maps.recv_slot[static_cast<size_t>(src) * per_rank + l];
      maps.recv_count[src] += rows;
      maps.rows_per_slot[l] += static_cast<int32_t>(rows);
    }
    maps.total_recv += maps.recv_count[src];
  }

  // Expert order (slot, source, route); back_gather is its inverse.
  maps.expert_gather.assign(maps.total_recv, 0);
  maps.back_gather.assign(maps.total_recv, 0);
  std::vector<int64_t> within(maps.recv_off);  // next recv row of (source, current slot)
  int64_t expert_row = 0;
  for (int l = 0; l < per_rank; ++l) {
    for (int src = 0; src < num_ranks; ++src) {
      const int64_t rows = maps.recv_slot[static_cast<size_t>(src) * per_rank + l];
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t recv_row = within[src]++;
        maps.expert_gather[expert_row] = static_cast<int32_t>(recv_row);
        maps.back_gather[recv_row] = static_cast<int32_t>(expert_row);
        ++expert_row;
      }
    }
  }
  return maps;
}

}  // namespace iser::moe
