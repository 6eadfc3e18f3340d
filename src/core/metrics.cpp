#include "iser/metrics.h"

#include <algorithm>

namespace iser {
namespace {

template <typename T>
double ratio_max_mean(std::span<const T> loads) {
  if (loads.empty()) return 1.0;
  int64_t total = 0;
  int64_t max_load = 0;
  for (const T l : loads) {
    total += l;
    max_load = std::max<int64_t>(max_load, l);
  }
  if (total == 0) return 1.0;
  return static_cast<double>(max_load) * static_cast<double>(loads.size()) /
         static_cast<double>(total);
}

struct Traffic {
  int64_t max_send_out = 0;
  int64_t max_receive_in = 0;
};

Traffic traffic_of(int num_ranks, std::span<const RouteFlow> flows) {
  std::vector<int64_t> send_out(num_ranks, 0);
  std::vector<int64_t> receive_in(num_ranks, 0);
  for (const RouteFlow& f : flows) {
    if (f.src_rank == f.dst_rank) continue;
    send_out[f.src_rank] += f.routes;
    receive_in[f.dst_rank] += f.routes;
  }
  return {*std::max_element(send_out.begin(), send_out.end()),
          *std::max_element(receive_in.begin(), receive_in.end())};
}

}  // namespace

double imbalance_ratio(std::span<const int64_t> loads) {
  return ratio_max_mean(loads);
}
double imbalance_ratio(std::span<const int32_t> loads) {
  return ratio_max_mean(loads);
}

std::vector<int64_t> loads_from_flows(int num_ranks, std::span<const RouteFlow> flows) {
  std::vector<int64_t> loads(num_ranks, 0);
  for (const RouteFlow& f : flows) loads[f.dst_rank] += f.routes;
  return loads;
}

InvocationMetrics measure_invocation(const Topology& topo, const CountMatrix& counts,
                                     const PolicyResult& result) {
  InvocationMetrics m;
  const auto home = counts.home_loads(topo);
  m.r_before = imbalance_ratio(home);
  const auto before = traffic_of(topo.num_ranks, home_flows(topo, counts));
  m.max_send_out_before = before.max_send_out;
  m.max_receive_in_before = before.max_receive_in;
  if (result.has_flows) {
    m.r_after = imbalance_ratio(loads_from_flows(topo.num_ranks, result.flows));
    const auto after = traffic_of(topo.num_ranks, result.flows);
    m.max_send_out = after.max_send_out;
    m.max_receive_in = after.max_receive_in;
  } else {
    m.r_after = imbalance_ratio(std::span<const int32_t>(result.plan.loads));
    m.max_send_out = -1;
    m.max_receive_in = -1;
  }
  std::vector<int32_t> payloads(topo.num_ranks, 0);
  for (const Broadcast& b : result.plan.broadcasts) {
    ++m.num_broadcasts;
    if (!b.owner_in_group()) ++m.owner_outside_broadcasts;
    if (b.resident) {
      ++m.resident_broadcasts;
      m.resident_copies += b.remote_copies();
      continue;
    }
    m.remote_copies += b.remote_copies();
    ++payloads[b.owner];
  }
  m.max_owner_payloads = *std::max_element(payloads.begin(), payloads.end());
  return m;
}

}  // namespace iser
