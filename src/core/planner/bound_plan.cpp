// The plan over given broadcasts with the least max load (bound_internal.h: plan_over).
//
// With the broadcasts fixed, the quotas are a transportation problem: expert e's hist[e] routes go
// to its owner or to members of its groups, and rank r computes at most `cap` routes in all (its
// home experts that nobody broadcasts included). A maximum flow source -> broadcast expert ->
// host -> sink, with rank r's edge to the sink at cap minus r's routes that stay home, carries
// every route exactly when such quotas exist, and its flows are whole routes (a maximum flow over
// integral capacities is integral). The least cap is bisected.
#include <algorithm>
#include <limits>
#include <queue>

#include "bound_internal.h"
#include "iser/planner.h"

namespace iser::bound_detail {
namespace {

// Dinic's maximum flow; the graphs here have four layers, so the search depth is four.
class MaxFlow {
 public:
  explicit MaxFlow(int num_nodes) : adj_(num_nodes), level_(num_nodes), next_(num_nodes) {}

  int add_edge(int from, int to, int64_t cap) {
    adj_[from].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, cap});
    adj_[to].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0});
    return static_cast<int>(edges_.size()) - 2;
  }
  // The flow on an edge add_edge returned: what its reverse edge holds.
  int64_t flow_on(int edge) const { return edges_[edge ^ 1].cap; }

  int64_t run(int source, int sink) {
    int64_t total = 0;
    while (levels_from(source, sink)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (const int64_t pushed = push(source, sink, kUnbounded)) total += pushed;
    }
    return total;
  }

 private:
  struct Edge {
    int to;
    int64_t cap;
  };
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

  bool levels_from(int source, int sink) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> queue;
    level_[source] = 0;
    queue.push(source);
    while (!queue.empty()) {
      const int v = queue.front();
      queue.pop();
      for (const int id : adj_[v]) {
        const Edge& e = edges_[id];
        if (e.cap > 0 && level_[e.to] < 0) {
          level_[e.to] = level_[v] + 1;
          queue.push(e.to);
        }
      }
    }
    return level_[sink] >= 0;
  }
  int64_t push(int v, int sink, int64_t limit) {
    if (v == sink) return limit;
    for (int& i = next_[v]; i < static_cast<int>(adj_[v].size()); ++i) {
      const int id = adj_[v][i];
      if (edges_[id].cap <= 0 || level_[edges_[id].to] != level_[v] + 1) continue;
      const int64_t pushed = push(edges_[id].to, sink, std::min(limit, edges_[id].cap));
      if (pushed > 0) {
        edges_[id].cap -= pushed;
        edges_[id ^ 1].cap += pushed;
        return pushed;
      }
    }
    return 0;
  }

  std::vector<Edge> edges_;
  std::vector<std::vector<int>> adj_;
  std::vector<int> level_, next_;
};

// The flow network for one cap, with the edge ids the plan is read from.
struct Network {
  MaxFlow flow;
  std::vector<std::vector<int>> host_edge;  // per distinct expert: per rank, edge id or -1
  bool complete = false;
};

}  // namespace

Plan plan_over(const Topology& topo, const CountMatrix& counts,
               const std::vector<BlockBroadcast>& broadcasts) {
  const int P = topo.num_ranks;
  const auto hist = counts.histogram();
  const auto home = counts.home_loads(topo);
  std::vector<int> experts;  // distinct, in order of first appearance
  std::vector<int> slot_of(static_cast<size_t>(topo.num_experts), -1);
  for (const BlockBroadcast& b : broadcasts) {
    if (slot_of[b.expert] < 0) {
      slot_of[b.expert] = static_cast<int>(experts.size());
      experts.push_back(b.expert);
    }
  }
  std::vector<int64_t> stays(home.begin(), home.end());  // routes that never leave home
  int64_t moving = 0;
  for (const int e : experts) {
    stays[topo.owner_of(e)] -= hist[e];
    moving += hist[e];
  }
  const int num_experts = static_cast<int>(experts.size());
  auto build = [&](int64_t cap) {
    // Nodes: 0 source, 1 sink, 2 + i expert i, 2 + num_experts + r rank r.
    Network net{MaxFlow(2 + num_experts + P), {}, false};
    net.host_edge.assign(static_cast<size_t>(num_experts), std::vector<int>(P, -1));
    for (int i = 0; i < num_experts; ++i) {
      const int e = experts[i];
      const int o = topo.owner_of(e);
      net.flow.add_edge(0, 2 + i, hist[e]);
      net.host_edge[i][o] = net.flow.add_edge(2 + i, 2 + num_experts + o, hist[e]);
    }
    for (const BlockBroadcast& b : broadcasts) {
      const int i = slot_of[b.expert];
      for (int r = b.group_begin; r < b.group_begin + b.group_size; ++r) {
        if (net.host_edge[i][r] < 0) {
          net.host_edge[i][r] = net.flow.add_edge(2 + i, 2 + num_experts + r, hist[b.expert]);
        }
      }
    }
    for (int r = 0; r < P; ++r) {
      if (stays[r] > cap) return net;
      net.flow.add_edge(2 + num_experts + r, 1, cap - stays[r]);
    }
    net.complete = net.flow.run(0, 1) == moving;
    return net;
  };
  // Every route at home is a complete flow: the largest home load is a cap that works.
  int64_t lo = *std::max_element(stays.begin(), stays.end()) - 1;
  int64_t hi = *std::max_element(home.begin(), home.end());
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (build(mid).complete) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  Network net = build(hi);
  ISER_CHECK(net.complete, "bound: internal error: no flow at a cap that must hold one");

  Plan plan = make_empty_plan(topo, counts);
  plan.owner_uses_home_slot = true;  // an owner inside a group serves from its home slot
  std::vector<int> latest(static_cast<size_t>(num_experts), -1);
  for (const BlockBroadcast& b : broadcasts) {
    Broadcast out;
    out.expert = b.expert;
    out.owner = topo.owner_of(b.expert);
    out.level = b.level;
    out.group_begin = b.group_begin;
    out.group_size = b.group_size;
    out.quota.assign(static_cast<size_t>(P), 0);
    const int i = slot_of[b.expert];
    for (int r = b.group_begin; r < b.group_begin + b.group_size; ++r) {
      if (r != out.owner)
        out.quota[r] = static_cast<int32_t>(net.flow.flow_on(net.host_edge[i][r]));
    }
    latest[i] = static_cast<int>(plan.broadcasts.size());
    plan.broadcasts.push_back(std::move(out));
  }
  // The owner's share sits in the latest broadcast of each expert (iser's bookkeeping).
  for (int i = 0; i < num_experts; ++i) {
    const int o = topo.owner_of(experts[i]);
    plan.broadcasts[latest[i]].quota[o] =
        static_cast<int32_t>(net.flow.flow_on(net.host_edge[i][o]));
  }
  for (int r = 0; r < P; ++r) plan.loads[r] = static_cast<int32_t>(stays[r]);
  for (int i = 0; i < num_experts; ++i) {
    for (int r = 0; r < P; ++r) {
      if (net.host_edge[i][r] >= 0) {
        plan.loads[r] += static_cast<int32_t>(net.flow.flow_on(net.host_edge[i][r]));
      }
    }
  }
  PlannerWorkspace ws;
  color_slots(topo, plan, ws);
  assign_transport(topo, plan);
  return plan;
}

}  // namespace iser::bound_detail
