// The bound tool (src/core/planner/bound.cpp): exact on cases with a known optimum, never above
// a valid plan's max load, and the combinatorial bound never above the solver's.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "core/planner/bound_internal.h"
#include "iser/bound.h"
#include "iser/planner.h"
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

// The block search's plan, when there is one, is a valid iser plan at or above `upper` (equal
// unless the solver found a better one after it) and not below the bound.
void check_bound_plan(const Topology& topo, const CountMatrix& counts, const PlanBound& b) {
  if (!b.plan) return;
  check_plan(topo, counts, *b.plan, make_policy("iser", topo)->validation());
  ASSERT_TRUE(b.upper.has_value());
  EXPECT_LE(*b.upper, max_load(*b.plan));
  EXPECT_LE(b.lower, max_load(*b.plan));
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
    EXPECT_TRUE(b.optimal());
    EXPECT_EQ(b.upper.value_or(-1), 60);
  }
  // The slot budget: three hot owners, S = 1, groups of 4 or 8 among 8 ranks: at most two
  // broadcasts fit (8 helper slots), so one owner keeps its 40 routes; T is 15.
  {
    const Topology topo = Topology::make(8, 8, 1, 4);
    BoundOptions combinatorial_only;
    combinatorial_only.use_solver = false;
    const PlanBound b =
        plan_bound(topo, one_row(8, {40, 40, 40, 0, 0, 0, 0, 0}), combinatorial_only);
    EXPECT_EQ(b.combinatorial, 40);
    EXPECT_TRUE(b.optimal());
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

// The best max load any plan under iser's constraints reaches, by exhaustive search (tiny
// shapes only): every set of broadcasts (expert, aligned group of its owner's team other than the
// owner alone) with every rank a member of at most S groups and at most S broadcasts per owner;
// for a set, the least max load of a whole-route assignment of every expert's routes to its
// owner or its groups' members is, by Hall's theorem on the transportation problem, the largest
// ceil(routes of X / |ranks allowed for X|) over expert sets X.
int64_t brute_force_optimum(const Topology& topo, const std::vector<int64_t>& hist) {
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const int S = topo.num_slots;
  struct Item {
    int expert;
    uint32_t ranks;  // bit mask of the group's members
  };
  std::vector<Item> items;
  for (int e = 0; e < E; ++e) {
    if (hist[e] == 0) continue;
    const int o = topo.owner_of(e);
    for (int level = 0; level < topo.num_levels(); ++level) {
      const int g_first = topo.first_group_of_team(level, o);
      for (int g = g_first; g < g_first + topo.groups_per_team(level); ++g) {
        const int begin = topo.group_begin(level, g);
        const int size = topo.group_size(level);
        if (size == 1 && begin == o) continue;
        items.push_back({e, ((1u << size) - 1) << begin});
      }
    }
  }
  std::vector<uint32_t> allowed(E);
  for (int e = 0; e < E; ++e) allowed[e] = 1u << topo.owner_of(e);
  auto least_max_load = [&] {
    int64_t best = 0;
    for (uint32_t X = 1; X < (1u << E); ++X) {
      int64_t routes = 0;
      uint32_t ranks = 0;
      for (int e = 0; e < E; ++e) {
        if (X >> e & 1) {
          routes += hist[e];
          ranks |= allowed[e];
        }
      }
      const int n = std::popcount(ranks);
      best = std::max(best, (routes + n - 1) / n);
    }
    return best;
  };
  std::vector<int> member(P, 0), exports(P, 0);
  int64_t best = least_max_load();
  std::function<void(size_t)> extend = [&](size_t first) {
    for (size_t i = first; i < items.size(); ++i) {
      const Item& it = items[i];
      const int o = topo.owner_of(it.expert);
      bool fits = exports[o] < S;
      for (int r = 0; r < P; ++r) fits = fits && (!(it.ranks >> r & 1) || member[r] < S);
      if (!fits) continue;
      const uint32_t saved = allowed[it.expert];
      ++exports[o];
      for (int r = 0; r < P; ++r) member[r] += it.ranks >> r & 1;
      allowed[it.expert] |= it.ranks;
      best = std::min(best, least_max_load());
      extend(i + 1);
      allowed[it.expert] = saved;
      --exports[o];
      for (int r = 0; r < P; ++r) member[r] -= it.ranks >> r & 1;
    }
  };
  extend(0);
  return best;
}

// On tiny shapes the bound is compared with the exhaustive optimum: never above it (a proof must
// hold), equal to it where the solver says "optimal", and every policy at or above it.
TEST(PlanBound, ExhaustiveOptimumOnTinyShapes) {
  struct Shape {
    int P, E, S, g_min, lsa;
  };
  std::mt19937 rng(7);
  int solved = 0, total = 0, blocks_above = 0;
  for (const Shape sh : {Shape{4, 4, 1, 1, 0}, Shape{4, 8, 1, 1, 0}, Shape{4, 4, 2, 1, 0},
                         Shape{4, 8, 2, 2, 0}, Shape{4, 8, 2, 1, 2}, Shape{8, 8, 1, 2, 0}}) {
    const Topology topo = Topology::make(sh.P, sh.E, sh.S, sh.g_min, sh.lsa);
    for (int trial = 0; trial < 6; ++trial) {
      SCOPED_TRACE(::testing::Message() << "P=" << sh.P << " E=" << sh.E << " S=" << sh.S
                                        << " g_min=" << sh.g_min << " trial " << trial);
      CountMatrix counts(sh.P, sh.E);
      // Skewed rows: a few hot experts, the rest light (exponential weights).
      std::exponential_distribution<double> weight(1.0);
      std::vector<double> w(sh.E);
      for (double& x : w) x = std::pow(weight(rng), 3);
      for (int s = 0; s < sh.P; ++s) {
        for (int e = 0; e < sh.E; ++e) counts.at(s, e) = static_cast<int32_t>(w[e] * 7 + s % 3);
      }
      const auto hist = counts.histogram();
      const int64_t optimum = brute_force_optimum(topo, hist);
      const PlanBound b = plan_bound(topo, counts);
      EXPECT_LE(b.combinatorial, optimum);
      EXPECT_LE(b.blocks, optimum);
      EXPECT_LE(b.lower, optimum);
      check_bound_plan(topo, counts, b);
      blocks_above += b.blocks > b.combinatorial ? 1 : 0;
      ASSERT_TRUE(b.upper.has_value());
      EXPECT_GE(*b.upper, optimum);  // a real plan's max load
      if (b.optimal()) {
        EXPECT_EQ(b.lower, optimum);
        ++solved;
      }
      ++total;
      for (const std::string policy : {"iser", "halo-q"}) {
        const auto p = make_policy(policy, topo);
        const PolicyResult r = p->plan(counts);
        check_plan(topo, counts, r.plan, p->validation());
        EXPECT_GE(max_load(r.plan), optimum) << policy;
      }
    }
  }
  if (bound_solver_available()) {
    EXPECT_EQ(solved, total);
    std::printf("block program above the combinatorial bound: %d of %d\n", blocks_above, total);
  }
}

// Fuzzed count matrices on larger shapes (the slot budget's relaxation for many broadcasts
// included): no policy under iser's constraints ever beats the bound, with or without the solver.
TEST(PlanBound, NoPolicyBeatsItOnFuzzedInputs) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    const int P = std::array{8, 12, 16}[trial % 3];
    const int S = 1 + static_cast<int>(rng() % 8);
    const int E = P * (1 + static_cast<int>(rng() % 4));
    const Topology topo = Topology::make(P, E, S, 1 + static_cast<int>(rng() % 4));
    SCOPED_TRACE(::testing::Message()
                 << "P=" << P << " E=" << E << " S=" << S << " trial " << trial);
    CountMatrix counts(P, E);
    std::exponential_distribution<double> weight(1.0);
    const double power = 1.0 + static_cast<double>(rng() % 4);
    std::vector<double> w(E);
    for (double& x : w) x = std::pow(weight(rng), power);
    for (int src = 0; src < P; ++src) {
      for (int e = 0; e < E; ++e)
        counts.at(src, e) = static_cast<int32_t>(w[e] * 50 * (1 + src % 2));
    }
    BoundOptions options;
    options.time_limit_s = 0.2;
    options.use_solver = trial % 2 == 0;
    const PlanBound b = plan_bound(topo, counts, options);
    EXPECT_LE(b.combinatorial, b.lower);
    check_bound_plan(topo, counts, b);
    for (const std::string policy : {"iser", "halo-q", "owner-home", "absorb", "none"}) {
      const auto p = make_policy(policy, topo);
      const PolicyResult r = p->plan(counts);
      check_plan(topo, counts, r.plan, p->validation());
      EXPECT_LE(b.lower, max_load(r.plan)) << policy;
    }
  }
}

// The block program alone, on tiny shapes whose blocks hold 2 or 4 ranks and where every helper
// slot is contested (a few hot owners, S = 1): never above the exhaustive optimum, and above the
// combinatorial bound on some inputs (the cases it exists for).
TEST(PlanBound, BlockProgramNeverAboveTheOptimum) {
  if (!bound_solver_available()) GTEST_SKIP() << "built without CBC";
  std::mt19937 rng(23);
  int above = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int P = trial % 2 == 0 ? 4 : 8;
    const int g_min = trial % 4 < 2 ? 2 : P / 2;
    const Topology topo = Topology::make(P, P, 1, g_min);
    SCOPED_TRACE(::testing::Message() << "P=" << P << " g_min=" << g_min << " trial " << trial);
    CountMatrix counts(P, P);
    for (int e = 0; e < P; ++e) {
      const bool hot = rng() % 3 == 0;
      counts.at(0, e) = static_cast<int32_t>(hot ? 20 + rng() % 40 : rng() % 8);
    }
    const int64_t optimum = brute_force_optimum(topo, counts.histogram());
    const PlanBound b = plan_bound(topo, counts);
    EXPECT_LE(b.blocks, optimum);
    EXPECT_LE(b.lower, optimum);
    check_bound_plan(topo, counts, b);
    if (b.upper) {
      EXPECT_GE(*b.upper, optimum);
    }
    above += b.blocks > b.combinatorial ? 1 : 0;
  }
  EXPECT_GT(above, 0);
}

// A skew-family invocation where every helper slot is needed (zipf-1.5, E = 288, EP72, S = 2:
// 14 owners above 1.02 T need 16 broadcasts, and 72 ranks in blocks of 9 hold 16): the slot
// budget and the root relaxation stay near T; the block program proves iser's plan optimal.
TEST(PlanBound, BlockProgramClosesTheSlotBoundCase) {
  if (!bound_solver_available()) GTEST_SKIP() << "built without CBC";
  SyntheticOptions o;
  o.kind = "zipf-1.5";
  o.num_experts = 288;
  o.top_k = 8;
  const Topology topo = Topology::make(72, 288, 2);
  const CountMatrix counts = make_synthetic(o)->counts(0, 0, 72, 8192);
  BoundOptions options;
  options.time_limit_s = 30;
  const PlanBound b = plan_bound(topo, counts, options);
  const int64_t iser_max = max_load(plan_iser(topo, counts));
  EXPECT_LT(b.combinatorial, b.mean_load * 1.01);
  EXPECT_EQ(b.blocks, iser_max);
  EXPECT_TRUE(b.optimal());
  EXPECT_EQ(b.method, BoundMethod::kBlocks);
  EXPECT_GT(b.r_lower(), 1.08);
}

// Where every helper slot is needed, which block takes which broadcast decides the max load,
// and iser's greedy placement can miss it: the block search's plan (a valid iser plan) ends
// below iser's on this EP72 S = 2 invocation, and proves the optimum (it meets the bound).
TEST(PlanBound, BlockSearchFindsPlansBelowIsers) {
  if (!bound_solver_available()) GTEST_SKIP() << "built without CBC";
  const Topology topo = Topology::make(72, 288, 2);
  SyntheticOptions o;
  o.kind = "hot-ranks";
  o.num_experts = 288;
  o.top_k = 8;
  const CountMatrix counts = make_synthetic(o)->counts(0, 0, 72, 8192);
  BoundOptions options;
  options.time_limit_s = 4;  // the plan search needs well under a second of it (2-core CI VM)
  const PlanBound b = plan_bound(topo, counts, options);
  ASSERT_TRUE(b.plan.has_value());
  check_bound_plan(topo, counts, b);
  EXPECT_LT(max_load(*b.plan), max_load(plan_iser(topo, counts)));
  EXPECT_TRUE(b.optimal());  // the bound meets the plan
}

// plan_over (the block search's plans): on random broadcast sets that keep iser's constraints,
// a valid iser plan whose max load is the least the broadcasts allow, which by Hall's theorem is
// the largest over expert sets X of (routes of X + home routes that stay on X's hosts) / hosts.
TEST(PlanBound, PlanOverReachesTheLeastMaxLoad) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 60; ++trial) {
    const int P = std::array{4, 8}[trial % 2];
    const int E = 2 * P;
    const Topology topo = Topology::make(P, E, 2, 2);
    CountMatrix counts(P, E);
    for (int s = 0; s < P; ++s) {
      for (int e = 0; e < E; ++e)
        counts.at(s, e) = static_cast<int32_t>(rng() % (e % 5 == 0 ? 40 : 6));
    }
    // Random broadcasts, each admitted only while every constraint holds.
    std::vector<bound_detail::BlockBroadcast> chosen;
    std::vector<int> member(P, 0), exports(P, 0);
    for (int attempt = 0; attempt < 12; ++attempt) {
      const int e = static_cast<int>(rng() % E);
      const int level = static_cast<int>(rng() % topo.num_levels());
      const int size = topo.group_size(level);
      const int begin = static_cast<int>(rng() % (P / size)) * size;
      const int o = topo.owner_of(e);
      bool fits = exports[o] < 2;
      for (int r = begin; r < begin + size; ++r) fits = fits && member[r] < 2;
      for (const auto& b : chosen) {
        const bool meets = b.group_begin < begin + size && begin < b.group_begin + b.group_size;
        fits = fits && !(b.expert == e && meets);
      }
      if (!fits) continue;
      chosen.push_back({e, level, begin, size});
      ++exports[o];
      for (int r = begin; r < begin + size; ++r) ++member[r];
    }
    SCOPED_TRACE(::testing::Message()
                 << "P=" << P << " trial " << trial << ", " << chosen.size() << " broadcasts");
    const Plan plan = bound_detail::plan_over(topo, counts, chosen);
    check_plan(topo, counts, plan, make_policy("iser", topo)->validation());
    ASSERT_EQ(plan.broadcasts.size(), chosen.size());
    // Hall: every expert set X needs its hosts to hold its routes and their routes that stay.
    const auto hist = counts.histogram();
    const auto home = counts.home_loads(topo);
    std::vector<int> experts;
    std::vector<uint32_t> hosts(E, 0);
    std::vector<int64_t> stays(home.begin(), home.end());
    for (const auto& b : chosen) {
      if (hosts[b.expert] == 0) {
        experts.push_back(b.expert);
        hosts[b.expert] = 1u << topo.owner_of(b.expert);
        stays[topo.owner_of(b.expert)] -= hist[b.expert];
      }
      hosts[b.expert] |= ((1u << b.group_size) - 1) << b.group_begin;
    }
    int64_t least = *std::max_element(stays.begin(), stays.end());
    for (uint32_t X = 1; X < (1u << experts.size()); ++X) {
      int64_t routes = 0;
      uint32_t ranks = 0;
      for (size_t i = 0; i < experts.size(); ++i) {
        if (X >> i & 1) {
          routes += hist[experts[i]];
          ranks |= hosts[experts[i]];
        }
      }
      for (int r = 0; r < P; ++r) routes += (ranks >> r & 1) ? stays[r] : 0;
      const int n = std::popcount(ranks);
      least = std::max(least, (routes + n - 1) / n);
    }
    EXPECT_EQ(max_load(plan), least);
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
