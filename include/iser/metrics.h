// Metrics of docs/design.md §7 for one invocation, and their aggregation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "iser/counts.h"
#include "iser/policy.h"
#include "iser/topology.h"

namespace iser {

// max / mean; 1.0 when every load is zero.
double imbalance_ratio(std::span<const int64_t> loads);
double imbalance_ratio(std::span<const int32_t> loads);

struct InvocationMetrics {
  double r_before = 1.0;
  double r_after = 1.0;
  int64_t max_send_out_before = 0;
  int64_t max_receive_in_before = 0;
  int64_t max_send_out = 0;  // -1 when the policy places no routes (oracle)
  int64_t max_receive_in = 0;
  int32_t num_broadcasts = 0;
  int32_t remote_copies = 0;       // sum over moved broadcasts of |G \ {o}|
  int32_t max_owner_payloads = 0;  // moved broadcasts sourced by the busiest owner
  int32_t owner_outside_broadcasts = 0;
  int32_t resident_broadcasts = 0;
  int32_t resident_copies = 0;  // remote copies not moved thanks to residency
};

InvocationMetrics measure_invocation(const Topology& topo, const CountMatrix& counts,
                                     const PolicyResult& result);

// Loads per rank implied by flows (sum of routes by destination).
std::vector<int64_t> loads_from_flows(int num_ranks, std::span<const RouteFlow> flows);

}  // namespace iser
