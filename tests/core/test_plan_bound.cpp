// The bound tool (src/core/planner/bound.cpp): exact on cases with a known optimum, never above
// a valid plan's max load, and the combinatorial bound never above the solver's.
#include <algorithm>

#include <gtest/gtest.h>

#include "iser/bound.h"
#include "iser/policy.h"
#include "iser/trace.h"
#include "iser/validator.h"
#include "trace_test_util.h"

namespace iser {
namespace {

using testing::expect_error;

int64_t max_load(const Plan& plan) {
  return *std::max_element(plan.loads.begin(), plan.loads.end());
}

// One source rank holding `hist` (other rows empty).
CountMatrix one_row(int P, const std::vector<int32_t>& hist) {
  CountMatrix c(P, static_cast<int>(hist.size()));
  std::copy(hist.begin(), hist.end(), c.row(0).begin());
  return c;
}

TEST(PlanBound, KnownOptima) {
  // One hot expert, S = 1: broadcast over all 4 ranks reaches T = 25.
  {
    const Topology topo = Topology::make(4, 4, 1, 1);
    const PlanBound b = plan_bound(topo, one_row(4, {100, 0, 0, 0}));
    EXPECT_EQ(b.lower, 25);
    EXPECT_DOUBLE_EQ(b.r_lower(), 1.0);
  }
  // Two hot experts on one owner, S = 1: the owner exports one and keeps the other's 60 routes.
  {
    const Topology topo = Topology::make(4, 8, 1, 1);
    const PlanBound b = plan_bound(topo, one_row(4, {60, 60, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(b.combinatorial, 60);
    EXPECT_EQ(b.lower, 60);
    if (bound_solver_available()) {
      EXPECT_EQ(b.method, BoundMethod::kIpOptimal);
      EXPECT_EQ(b.upper.value_or(-1), 60);
    }
  }
  // S = 0: nothing moves, the bound is the home max load.
  {
    const Topology topo = Topology::make(4, 8, 0, 1);
    const PlanBound b = plan_bound(topo, one_row(4, {60, 60, 5, 0, 0, 0, 0, 0}));
    EXPECT_EQ(b.lower, 120);
  }
}

TEST(PlanBound, NeverAbovePoliciesAndSolverPlans) {
  // Small skewed matrices from the families; every policy's validated plan bounds from above.
  BoundOptions options;
  options.time_limit_s = 0.5;  // a dual bound at the limit is still a bound
  for (const std::string kind : {"zipf-1.2", "hot-ranks", "rank-skew"}) {
    SyntheticOptions so;
    so.kind = kind;
    so.num_experts = 32;
    so.top_k = 4;
    so.num_layers = 1;
    const auto source = make_synthetic(so);
    for (const int S : {1, 2}) {
      SCOPED_TRACE(kind + " S=" + std::to_string(S));
      const Topology topo = Topology::make(8, 32, S);
      const CountMatrix counts = source->counts(0, 0, 8, 256);
      const PlanBound b = plan_bound(topo, counts, options);
      EXPECT_LE(b.combinatorial, b.lower);
      if (b.upper) {
        EXPECT_LE(b.lower, *b.upper);
      }
      for (const std::string policy : {"iser", "halo-q", "none"}) {
        const auto p = make_policy(policy, topo);
        const PolicyResult r = p->plan(counts);
        check_plan(topo, counts, r.plan, p->validation());
        EXPECT_LE(b.lower, max_load(r.plan)) << policy;
      }
    }
  }
}

TEST(PlanBound, BadInput) {
  const Topology topo = Topology::make(4, 8, 1);
  expect_error([&] { plan_bound(topo, CountMatrix(2, 8)); }, {"2 x 8", "P = 4"});
  BoundOptions options;
  options.time_limit_s = 0;
  expect_error([&] { plan_bound(topo, CountMatrix(4, 8), options); }, {"time limit"});
}

}  // namespace
}  // namespace iser
