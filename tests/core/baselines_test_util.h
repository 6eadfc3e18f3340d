// Helpers shared by the baseline policy tests.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"

namespace iser::baselines_test {

// Flows ordered by (expert, source, destination), so expectations do not depend on the order a
// policy emits them in.
inline std::vector<RouteFlow> sorted(std::vector<RouteFlow> flows) {
  std::sort(flows.begin(), flows.end(), [](const RouteFlow& a, const RouteFlow& b) {
    return std::tie(a.expert, a.src_rank, a.dst_rank) < std::tie(b.expert, b.src_rank, b.dst_rank);
  });
  return flows;
}

// Every route placed exactly once: per (source, expert) the flows sum to c[s][e]; flows are
// positive, in range and list each (source, expert, destination) once. Empty string when all
// holds, else the first problem.
inline std::string flow_conservation_error(const CountMatrix& counts,
                                           std::span<const RouteFlow> flows) {
  const int P = counts.num_ranks();
  const int E = counts.num_experts();
  std::map<std::pair<int, int>, int64_t> placed;
  std::map<std::tuple<int, int, int>, int> seen;
  for (const RouteFlow& f : flows) {
    if (f.src_rank < 0 || f.src_rank >= P || f.dst_rank < 0 || f.dst_rank >= P || f.expert < 0 ||
        f.expert >= E) {
      return fmt::format("flow ({}, {}, {}) out of range", f.src_rank, f.expert, f.dst_rank);
    }
    if (f.routes <= 0) {
      return fmt::format("flow ({}, {}, {}) has {} routes", f.src_rank, f.expert, f.dst_rank,
                         f.routes);
    }
    if (++seen[{f.src_rank, f.expert, f.dst_rank}] > 1) {
      return fmt::format("flow ({}, {}, {}) listed twice", f.src_rank, f.expert, f.dst_rank);
    }
    placed[{f.src_rank, f.expert}] += f.routes;
  }
  for (int s = 0; s < P; ++s) {
    for (int e = 0; e < E; ++e) {
      const auto it = placed.find({s, e});
      const int64_t got = it == placed.end() ? 0 : it->second;
      if (got != counts.at(s, e)) {
        return fmt::format("rank {} expert {}: flows place {} routes, counts have {}", s, e, got,
                           counts.at(s, e));
      }
    }
  }
  return {};
}

inline CountMatrix counts_from_rows(const std::vector<std::vector<int32_t>>& rows) {
  CountMatrix counts(static_cast<int>(rows.size()), static_cast<int>(rows.at(0).size()));
  for (size_t s = 0; s < rows.size(); ++s) {
    for (size_t e = 0; e < rows[s].size(); ++e) {
      counts.at(static_cast<int>(s), static_cast<int>(e)) = rows[s][e];
    }
  }
  return counts;
}

}  // namespace iser::baselines_test
