// Routing maps of the EP layer (src/moe/routing_maps.h), host only (runs without a GPU): the
// whole dispatch -> expert -> combine path simulated with integer tags, for every rank, several
// topologies and every policy that places routes. Each route must come back from a slot that
// holds its own expert (home slot or a replica) with its own token.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "iser/error.h"
#include "iser/policy.h"
#include "moe/routing_maps.h"
#include "moe_test_util.h"

namespace iser::moe {
namespace {

struct MapsCase {
  int num_ranks, num_experts, num_slots, g_min;
};

int64_t tag(int expert, int64_t token) {
  return int64_t{expert} * 1'000'000 + token;
}

// The expert whose weights sit in local slot `l` of rank `d` under `plan`, -1 for an empty one.
int expert_in_slot(const Topology& topo, const Plan& plan, int d, int l) {
  const int home = topo.experts_per_rank();
  if (l < home) return topo.first_home_expert(d) + l;
  for (const Broadcast& b : plan.broadcasts) {
    if (b.in_group(d) && b.helper == l - home) return b.expert;
  }
  return -1;
}

void simulate(const MapsCase& c, const std::string& policy_name) {
  const Topology topo = Topology::make(c.num_ranks, c.num_experts, c.num_slots, c.g_min);
  const int tau = 96, top_k = 4, num_ranks = topo.num_ranks, per_rank = topo.slots_per_rank();
  std::vector<int32_t> ids;
  std::vector<float> unused;
  testing::make_routes(num_ranks * tau, top_k, topo.num_experts, ids, unused);
  const CountMatrix counts = CountMatrix::from_topk(ids, num_ranks, tau, top_k, topo.num_experts);
  const auto policy = make_policy(policy_name, topo);
  policy->prepare(std::span<const CountMatrix>(&counts, 1));  // static policies (eplb)
  const Plan plan = policy->plan(counts).plan;
  // The skewed routing must make the reference policy replicate, or the test proves little.
  if (policy_name == "halo-q") {
    ASSERT_FALSE(plan.broadcasts.empty());
  }
  SCOPED_TRACE(policy_name + " P" + std::to_string(num_ranks) + " broadcasts " +
               std::to_string(plan.broadcasts.size()));

  std::vector<RoutingMaps> maps;
  for (int r = 0; r < num_ranks; ++r) {
    maps.push_back(build_routing_maps(
        topo, counts, plan, r,
        std::span<const int32_t>(ids).subspan(static_cast<size_t>(r) * tau * top_k, tau * top_k),
        top_k));
  }
  // Dispatch: what s sends to d lands at d's recv block of s.
  std::vector<std::vector<int64_t>> recv(num_ranks);
  for (int d = 0; d < num_ranks; ++d) {
    recv[d].assign(maps[d].total_recv, -1);
    for (int s = 0; s < num_ranks; ++s) {
      ASSERT_EQ(maps[s].send_count[d], maps[d].recv_count[s]) << "s " << s << " d " << d;
      for (int64_t i = 0; i < maps[s].send_count[d]; ++i) {
        recv[d][maps[d].recv_off[s] + i] =
            int64_t{s} * tau + maps[s].send_gather[maps[s].send_off[d] + i];
      }
    }
  }
  // Expert compute in slot order, back to wire order, combine receive.
  std::vector<std::vector<int64_t>> comb(num_ranks);
  for (int s = 0; s < num_ranks; ++s) comb[s].assign(maps[s].send_gather.size(), -1);
  for (int d = 0; d < num_ranks; ++d) {
    const RoutingMaps& m = maps[d];
    ASSERT_EQ(static_cast<int>(m.rows_per_slot.size()), per_rank);
    std::vector<int64_t> y(m.total_recv);
    int64_t row = 0;
    for (int l = 0; l < per_rank; ++l) {
      const int expert = expert_in_slot(topo, plan, d, l);
      if (expert < 0) {
        ASSERT_EQ(m.rows_per_slot[l], 0) << "rows in an empty helper slot";
      }
      for (int32_t i = 0; i < m.rows_per_slot[l]; ++i, ++row) {
        y[row] = tag(expert, recv[d][m.expert_gather[row]]);
      }
    }
    for (int s = 0; s < num_ranks; ++s) {
      for (int64_t i = 0; i < m.recv_count[s]; ++i) {
        comb[s][maps[s].send_off[d] + i] = y[m.back_gather[m.recv_off[s] + i]];
      }
    }
  }
  // Every route comes back computed by its own expert on its own token.
  for (int s = 0; s < num_ranks; ++s) {
    for (int t = 0; t < tau; ++t) {
      for (int j = 0; j < top_k; ++j) {
        const size_t i = static_cast<size_t>(t) * top_k + j;
        const int expert = ids[static_cast<size_t>(s) * tau * top_k + i];
        if (expert < 0) {
          EXPECT_EQ(maps[s].route_row[i], -1);
          continue;
        }
        ASSERT_EQ(comb[s][maps[s].route_row[i]], tag(expert, int64_t{s} * tau + t))
            << "rank " << s << " token " << t << " choice " << j;
      }
    }
  }
}

TEST(RoutingMaps, DispatchComputeCombineRoundTripEveryPolicy) {
  const std::vector<MapsCase> cases = {{2, 16, 2, 2}, {4, 32, 2, 4}, {8, 64, 3, 2}, {6, 48, 2, 3}};
  for (const MapsCase& c : cases) {
    for (const std::string& name : available_policies()) {
      if (name == "oracle") continue;  // places no routes
      simulate(c, name);
    }
  }
}

TEST(RoutingMaps, RejectsRaggedIds) {
  const Topology topo = Topology::make(2, 8, 1);
  const CountMatrix counts(2, 8);
  const std::vector<int32_t> ids(7, 0);
  EXPECT_THROW(build_routing_maps(topo, counts, make_empty_plan(topo, counts), 0, ids, 2), Error);
}

}  // namespace
}  // namespace iser::moe
