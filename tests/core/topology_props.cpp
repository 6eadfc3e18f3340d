// Properties of the topology (aligned group levels, docs/design.md §3) and of the core metrics.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <numeric>

#include "iser/metrics.h"
#include "iser/topology.h"

namespace iser {
namespace {

RC_GTEST_PROP(TopologyProps, LevelsAreExactlyTheAlignedGroups, ()) {
  const int num_ranks = *rc::gen::inRange(2, 257);
  const int g_min = *rc::gen::inRange(1, 9);
  const auto topo = Topology::make(num_ranks, num_ranks * 4, 2, g_min);
  const auto sizes = topo.group_sizes();
  // Level 0 is all ranks; each finer level halves the group; level l >= 1 exists iff 2^l | P
  // and P >> l >= g_min.
  RC_ASSERT(sizes.front() == num_ranks);
  for (size_t l = 1; l < sizes.size(); ++l) {
    RC_ASSERT(num_ranks % (1 << l) == 0);
    RC_ASSERT(sizes[l] == num_ranks >> l);
    RC_ASSERT(sizes[l] >= g_min);
  }
  const int next = static_cast<int>(sizes.size());
  RC_ASSERT(num_ranks % (1 << next) != 0 || (num_ranks >> next) < g_min);
  // Groups of a level tile the ranks, and every group nests in one group of the level above.
  for (int level = 0; level < topo.num_levels(); ++level) {
    RC_ASSERT(topo.num_groups(level) * topo.group_size(level) == num_ranks);
    for (int r = 0; r < num_ranks; ++r) {
      const int g = topo.group_of(level, r);
      RC_ASSERT(r >= topo.group_begin(level, g) &&
                r < topo.group_begin(level, g) + topo.group_size(level));
      if (level > 0) RC_ASSERT(topo.group_of(level - 1, r) == g / 2);
    }
  }
}

RC_GTEST_PROP(TopologyProps, SlotsAreABijection, ()) {
  const int num_ranks = *rc::gen::inRange(2, 73);
  const int h = *rc::gen::inRange(1, 17);
  const int s = *rc::gen::inRange(0, 17);
  const auto topo = Topology::make(num_ranks, num_ranks * h, s);
  std::vector<int> seen(topo.total_slots(), 0);
  for (int e = 0; e < topo.num_experts; ++e) ++seen[topo.home_slot(e)];
  for (int r = 0; r < num_ranks; ++r) {
    for (int k = 0; k < s; ++k) ++seen[topo.helper_slot(r, k)];
  }
  RC_ASSERT(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

RC_GTEST_PROP(MetricsProps, ImbalanceRatioIsMaxOverMean, (std::vector<uint16_t> raw)) {
  RC_PRE(!raw.empty());
  const std::vector<int64_t> loads(raw.begin(), raw.end());
  const int64_t total = std::accumulate(loads.begin(), loads.end(), int64_t{0});
  const double r = imbalance_ratio(loads);
  if (total == 0) {
    RC_ASSERT(r == 1.0);
  } else {
    const double expected = static_cast<double>(*std::max_element(loads.begin(), loads.end())) *
                            static_cast<double>(loads.size()) / static_cast<double>(total);
    RC_ASSERT(std::abs(r - expected) <= 1e-12 * expected);
    RC_ASSERT(r >= 1.0 - 1e-12);
    RC_ASSERT(r <= static_cast<double>(loads.size()) + 1e-12);
  }
}

}  // namespace
}  // namespace iser
