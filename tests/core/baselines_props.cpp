// Property tests of the baseline policies (rapidcheck): every plan passes the validator with the
// policy's own invariants, flows place every route exactly once and match the plan's loads, and
// each policy keeps the promises of its definition.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <span>
#include <tuple>

#include "baselines_test_util.h"
#include "core/planner/synthetic_counts.h"
#include "iser/eplb.h"
#include "iser/metrics.h"
#include "iser/policy.h"
#include "iser/validator.h"

namespace iser {
namespace {

using baselines_test::flow_conservation_error;

struct Case {
  Topology topo;
  std::vector<CountMatrix> iterations;  // one layer's trace
};

// Random P in 2..32, E = P * H up to 512, S in 0..8 (mostly 1..4), skewed counts (a few all
// zero), 1..3 iterations.
rc::Gen<Case> gen_case() {
  return rc::gen::exec([] {
    const int P = *rc::gen::inRange(2, 33);
    const int H = *rc::gen::inRange(1, std::max(2, 512 / P + 1));
    const int S = *rc::gen::element(0, 1, 2, 3, 4, 4, 6, 8);
    const int max_count = *rc::gen::element(0, 1, 5, 100, 100, 3000, 3000);
    const int num_iterations = *rc::gen::inRange(1, 4);
    const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
    Case c{Topology::make(P, P * H, S), {}};
    for (int i = 0; i < num_iterations; ++i) {
      c.iterations.push_back(testing::random_skewed_counts(P, P * H, max_count, seed + i));
    }
    return c;
  });
}

// Checks shared by every baseline; returns the flow loads.
std::vector<int64_t> check_common(const Topology& topo, const CountMatrix& counts,
                                  const Policy& policy, const PolicyResult& result) {
  const auto violations = validate_plan(topo, counts, result.plan, policy.validation());
  if (!violations.empty()) RC_FAIL(std::string(policy.name()) + ": " + violations.front());
  RC_ASSERT(result.has_flows);
  const std::string flow_error = flow_conservation_error(counts, result.flows);
  if (!flow_error.empty()) RC_FAIL(std::string(policy.name()) + ": " + flow_error);
  const auto loads = loads_from_flows(topo.num_ranks, result.flows);
  for (int r = 0; r < topo.num_ranks; ++r) RC_ASSERT(loads[r] == result.plan.loads[r]);
  return loads;
}

// Quota plans: flows of each broadcast expert reach each rank exactly its combined quota.
void check_flows_follow_quotas(const Topology& topo, const PolicyResult& result) {
  std::vector<std::vector<int64_t>> quota(topo.num_experts);
  for (const Broadcast& b : result.plan.broadcasts) {
    auto& q = quota[b.expert];
    q.resize(topo.num_ranks, 0);
    for (int r = 0; r < topo.num_ranks; ++r) q[r] += b.quota[r];
  }
  std::vector<std::vector<int64_t>> to(topo.num_experts);
  for (const RouteFlow& f : result.flows) {
    if (quota[f.expert].empty()) {
      RC_ASSERT(f.dst_rank == topo.owner_of(f.expert));  // not replicated: home
      continue;
    }
    to[f.expert].resize(topo.num_ranks, 0);
    to[f.expert][f.dst_rank] += f.routes;
  }
  for (int e = 0; e < topo.num_experts; ++e) {
    if (quota[e].empty()) continue;
    to[e].resize(topo.num_ranks, 0);
    RC_ASSERT(to[e] == quota[e]);
  }
}

RC_GTEST_PROP(BaselineProps, P2pPlansValidateAndTheGreedyIsMaximal, ()) {
  const Case c = *gen_case();
  const bool limited = *rc::gen::arbitrary<bool>();
  const Topology& topo = c.topo;
  const CountMatrix& counts = c.iterations.front();
  auto policy = make_policy(limited ? "p2p-limited" : "p2p", topo);
  const PolicyResult result = policy->plan(counts);
  const auto loads = check_common(topo, counts, *policy, result);
  check_flows_follow_quotas(topo, result);
  RC_CLASSIFY(result.plan.broadcasts.empty(), "no copy");

  const int P = topo.num_ranks;
  const int64_t T = result.plan.target;
  const auto home = counts.home_loads(topo);
  const auto hist = counts.histogram();
  std::vector<int64_t> rest(hist.begin(), hist.end());  // routes left on the owner
  std::vector<std::vector<int32_t>> held(P);
  std::vector<int> copies(P, 0);
  for (const Broadcast& b : result.plan.broadcasts) {
    RC_ASSERT(b.group_size == 1);
    RC_ASSERT(b.level == kUnalignedLevel);
    RC_ASSERT(b.mode == TransportMode::kPointToPoint);
    const int m = b.group_begin;
    RC_ASSERT(m != b.owner);
    RC_ASSERT(b.quota[m] > 0);  // every copy moves routes
    RC_ASSERT(std::find(held[m].begin(), held[m].end(), b.expert) == held[m].end());
    held[m].push_back(b.expert);
    rest[b.expert] -= b.quota[m];
    ++copies[b.owner];
    RC_ASSERT(home[m] < T);          // only ranks below the water level receive
    RC_ASSERT(loads[m] <= T);        // and never above it
    RC_ASSERT(loads[b.owner] >= T);  // owners never drop below it
  }
  const int64_t max_home = *std::max_element(home.begin(), home.end());
  for (int r = 0; r < P; ++r) {
    RC_ASSERT(loads[r] <= std::max(max_home, T));
    if (limited) RC_ASSERT(copies[r] <= topo.num_slots);
  }
  // Maximal: a rank left above T is capped (p2p-limited) or none of its experts with routes
  // left can go anywhere (every rank below T with a free slot already holds it).
  for (int o = 0; o < P; ++o) {
    if (loads[o] <= T || (limited && copies[o] >= topo.num_slots)) continue;
    for (int e = topo.first_home_expert(o); e < topo.first_home_expert(o) + topo.experts_per_rank();
         ++e) {
      if (rest[e] <= 0) continue;
      for (int m = 0; m < P; ++m) {
        if (m == o || loads[m] >= T || static_cast<int>(held[m].size()) >= topo.num_slots) {
          continue;
        }
        RC_ASSERT(std::find(held[m].begin(), held[m].end(), e) != held[m].end());
      }
    }
  }
  // One payload per replica.
  const auto metrics = measure_invocation(topo, counts, result);
  RC_ASSERT(metrics.remote_copies == static_cast<int32_t>(result.plan.broadcasts.size()));
  RC_ASSERT(metrics.r_after <= metrics.r_before + 1e-12);
}

RC_GTEST_PROP(BaselineProps, AllRankReplicatesTheTopExpertsEverywhere, ()) {
  const Case c = *gen_case();
  const Topology& topo = c.topo;
  const CountMatrix& counts = c.iterations.front();
  const bool balanced = *rc::gen::arbitrary<bool>();
  auto policy = make_policy(balanced ? "all-rank-balanced" : "all-rank", topo);
  const PolicyResult result = policy->plan(counts);
  const auto loads = check_common(topo, counts, *policy, result);
  check_flows_follow_quotas(topo, result);

  const auto hist = counts.histogram();
  const int routed =
      static_cast<int>(std::count_if(hist.begin(), hist.end(), [](int64_t h) { return h > 0; }));
  const auto& b = result.plan.broadcasts;
  RC_ASSERT(static_cast<int>(b.size()) == std::min(topo.num_slots, routed));
  std::vector<bool> chosen(topo.num_experts, false);
  for (size_t i = 0; i < b.size(); ++i) {
    RC_ASSERT(b[i].helper == static_cast<int32_t>(i));
    RC_ASSERT(b[i].group_begin == 0 && b[i].group_size == topo.num_ranks && b[i].level == 0);
    if (i > 0) {
      RC_ASSERT(hist[b[i - 1].expert] > hist[b[i].expert] ||
                (hist[b[i - 1].expert] == hist[b[i].expert] && b[i - 1].expert < b[i].expert));
    }
    chosen[b[i].expert] = true;
  }
  // No unchosen expert beats the last chosen one.
  if (!b.empty()) {
    const int last = b.back().expert;
    for (int e = 0; e < topo.num_experts; ++e) {
      if (chosen[e]) continue;
      RC_ASSERT(hist[e] < hist[last] || (hist[e] == hist[last] && e > last));
    }
  }
  if (!balanced) {
    for (const RouteFlow& f : result.flows) {
      if (chosen[f.expert]) RC_ASSERT(f.src_rank == f.dst_rank);
    }
  } else {
    // Water level: every rank keeps its base load (home without the replicated experts); the
    // ranks that take replicated routes end at most one route above the least loaded rank.
    std::vector<int64_t> base = counts.home_loads(topo);
    for (const Broadcast& x : b) base[x.owner] -= hist[x.expert];
    const int64_t min_load = *std::min_element(loads.begin(), loads.end());
    for (int r = 0; r < topo.num_ranks; ++r) {
      RC_ASSERT(loads[r] >= base[r]);
      if (loads[r] > base[r]) RC_ASSERT(loads[r] <= min_load + 1);
    }
  }
  RC_ASSERT(measure_invocation(topo, counts, result).remote_copies ==
            static_cast<int32_t>(b.size()) * (topo.num_ranks - 1));
}

// Hosting rank of every replica of every expert for an EPLB placement planned from `weight`.
std::vector<std::vector<int>> eplb_hosts(const Topology& topo, const std::vector<double>& weight) {
  const EplbPlacement p =
      eplb_rebalance(weight, 1, topo.num_experts, {topo.total_slots(), 1, 1, topo.num_ranks});
  std::vector<std::vector<int>> hosts(topo.num_experts);
  std::vector<int> slots_per_rank(topo.num_ranks, 0);
  for (int x = 0; x < topo.total_slots(); ++x) {
    hosts[p.phy_to_log(0, x)].push_back(x / topo.slots_per_rank());
    ++slots_per_rank[x / topo.slots_per_rank()];
  }
  for (int r = 0; r < topo.num_ranks; ++r) RC_ASSERT(slots_per_rank[r] == topo.slots_per_rank());
  return hosts;
}

// Even split: each replica gets floor(c/n) or ceil(c/n) of a source's c routes; leftovers prefer
// the source's own replicas.
void check_even_split(const Topology& topo, const CountMatrix& counts,
                      const std::vector<std::vector<int>>& hosts, const PolicyResult& result) {
  RC_ASSERT(result.plan.broadcasts.empty());
  std::map<std::tuple<int, int, int>, int64_t> routes;
  for (const RouteFlow& f : result.flows) routes[{f.src_rank, f.expert, f.dst_rank}] += f.routes;
  for (int e = 0; e < topo.num_experts; ++e) {
    const int n = static_cast<int>(hosts[e].size());
    RC_ASSERT(n >= 1);
    for (int s = 0; s < topo.num_ranks; ++s) {
      const int64_t c = counts.at(s, e);
      for (int d = 0; d < topo.num_ranks; ++d) {
        const int64_t k = std::count(hosts[e].begin(), hosts[e].end(), d);
        const auto it = routes.find({s, e, d});
        const int64_t got = it == routes.end() ? 0 : it->second;
        RC_ASSERT(got >= k * (c / n));
        RC_ASSERT(got <= k * (c / n) + std::min<int64_t>(k, c % n));
        if (d == s) RC_ASSERT(got == k * (c / n) + std::min<int64_t>(k, c % n));
      }
    }
  }
}

std::vector<double> summed_hist(std::span<const CountMatrix> iterations, int num_experts) {
  std::vector<double> weight(num_experts, 0.0);
  for (const CountMatrix& m : iterations) {
    const auto hist = m.histogram();
    for (int e = 0; e < num_experts; ++e) weight[e] += static_cast<double>(hist[e]);
  }
  return weight;
}

RC_GTEST_PROP(BaselineProps, EplbSplitsEvenlyOverItsStaticReplicas, ()) {
  const Case c = *gen_case();
  const Topology& topo = c.topo;
  auto policy = make_policy("eplb", topo);
  policy->prepare(c.iterations);
  const auto hosts = eplb_hosts(topo, summed_hist(c.iterations, topo.num_experts));
  for (const CountMatrix& counts : c.iterations) {
    const PolicyResult result = policy->plan(counts);
    check_common(topo, counts, *policy, result);
    check_even_split(topo, counts, hosts, result);
    RC_ASSERT(measure_invocation(topo, counts, result).remote_copies == 0);
  }
}

RC_GTEST_PROP(BaselineProps, EplbWindowUsesOnlyThePreviousInvocations, ()) {
  const Case c = *gen_case();
  const Topology& topo = c.topo;
  PolicyOptions options;
  options.eplb_window = *rc::gen::inRange(0, 3);
  const int window = options.eplb_window == 0 ? 8 : options.eplb_window;
  auto policy = make_policy("eplb-window", topo, options);
  policy->prepare(c.iterations);  // ignored: the window must not see the future
  for (size_t i = 0; i < c.iterations.size(); ++i) {
    const CountMatrix& counts = c.iterations[i];
    const PolicyResult result = policy->plan(counts);
    check_common(topo, counts, *policy, result);
    if (i == 0) {
      RC_ASSERT(result.flows == home_flows(topo, counts));
      continue;
    }
    const size_t first = i > static_cast<size_t>(window) ? i - window : 0;
    const std::span<const CountMatrix> past(c.iterations.data() + first, i - first);
    check_even_split(topo, counts, eplb_hosts(topo, summed_hist(past, topo.num_experts)), result);
  }
}

}  // namespace
}  // namespace iser
