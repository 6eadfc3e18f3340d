// LSA teams: topology geometry, bad team sizes, the validator's team check, and plans on the
// team splits the runtime targets (P = 16 as 2 x 8, P = 24 as 3 x 8, P = 72 as one team and as
// 9 x 8, non-power-of-two teams).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/planner/synthetic_counts.h"
#include "iser/error.h"
#include "iser/policy.h"
#include "iser/validator.h"
#include "teams_test_util.h"

namespace iser {
namespace {

TEST(Teams, DefaultIsOneTeamOfAllRanks) {
  const Topology topo = Topology::make(16, 64, 4);
  EXPECT_EQ(topo.team_size(), 16);
  EXPECT_EQ(topo.num_teams(), 1);
  EXPECT_EQ(topo.group_sizes(), (std::vector<int>{16, 8, 4}));
  Topology aggregate{16, 64, 4};  // lsa_size = 0 also means one team
  EXPECT_EQ(aggregate.team_size(), 16);
  EXPECT_EQ(aggregate.group_sizes(), topo.group_sizes());
}

TEST(Teams, LevelsAreFormedInsideEachTeam) {
  const Topology topo = Topology::make(24, 96, 4, 4, 8);
  EXPECT_EQ(topo.num_teams(), 3);
  EXPECT_EQ(topo.group_sizes(), (std::vector<int>{8, 4}));
  EXPECT_EQ(topo.num_groups(0), 3);
  EXPECT_EQ(topo.num_groups(1), 6);
  EXPECT_EQ(topo.team_of(15), 1);
  EXPECT_EQ(topo.first_group_of_team(1, 17), 4);
  // Non-power-of-two team: level 0 only once the team stops halving.
  const Topology odd = Topology::make(15, 30, 2, 1, 5);
  EXPECT_EQ(odd.group_sizes(), (std::vector<int>{5}));
  const Topology twelve = Topology::make(36, 36, 2, 2, 12);
  EXPECT_EQ(twelve.group_sizes(), (std::vector<int>{12, 6, 3}));
  EXPECT_EQ(twelve.num_groups(2), 12);
}

TEST(Teams, BadTeamSizesAreRejectedNamingTheValue) {
  auto message = [](int lsa_size) {
    try {
      Topology::make(16, 64, 4, 4, lsa_size);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(-1).find("lsa_size = -1"), std::string::npos) << message(-1);
  EXPECT_NE(message(5).find("lsa_size = 5: it must divide the EP degree P = 16"), std::string::npos)
      << message(5);
  EXPECT_NE(message(32).find("lsa_size = 32"), std::string::npos) << message(32);
  EXPECT_NO_THROW(Topology::make(16, 64, 4, 4, 1));
  EXPECT_NO_THROW(Topology::make(16, 64, 4, 4, 16));
}

TEST(Teams, ValidatorRejectsABroadcastSpanningTwoTeams) {
  const Topology teams = Topology::make(4, 4, 1, 1, 2);
  const Topology one_team = Topology::make(4, 4, 1, 1);
  CountMatrix counts(4, 4);
  for (int r = 0; r < 4; ++r) counts.at(r, 0) = 10;
  Plan plan;
  plan.num_ranks = 4;
  plan.num_experts = 4;
  plan.num_slots = 1;
  plan.target = 10;
  plan.loads = {20, 10, 10, 0};
  Broadcast b;
  b.expert = 0;
  b.owner = 0;
  b.level = kUnalignedLevel;
  b.group_begin = 1;
  b.group_size = 2;  // ranks 1 (team 0) and 2 (team 1)
  b.helper = 0;
  b.mode = TransportMode::kPointToPoint;
  b.quota = {20, 10, 10, 0};
  plan.broadcasts = {b};
  ValidationOptions options;
  options.require_aligned_groups = false;
  auto has_team_error = [&](const Topology& topo) {
    for (const std::string& v : validate_plan(topo, counts, plan, options)) {
      if (v.find("span more than one LSA team of 2 ranks") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_team_error(teams));
  EXPECT_FALSE(has_team_error(one_team));
  options.require_team_local = false;
  EXPECT_FALSE(has_team_error(teams));
}

struct Split {
  int num_ranks;
  int lsa_size;
  int experts_per_rank;
  int num_slots;
  int g_min;
};

class TeamSplits : public ::testing::TestWithParam<Split> {};

TEST_P(TeamSplits, EveryPolicyPlansInsideTeams) {
  const Split s = GetParam();
  const Topology topo = Topology::make(s.num_ranks, s.num_ranks * s.experts_per_rank, s.num_slots,
                                       s.g_min, s.lsa_size);
  for (const std::string& name : test_util::team_policies()) {
    const auto policy = make_policy(name, topo, {});
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      for (const int max_count : {5, 400}) {
        const CountMatrix counts =
            testing::random_skewed_counts(topo.num_ranks, topo.num_experts, max_count, seed);
        const PolicyResult result = policy->plan(counts);
        EXPECT_EQ(test_util::team_plan_failure(topo, counts, *policy, result), "")
            << "seed " << seed;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, TeamSplits,
                         ::testing::Values(Split{16, 8, 16, 4, 4}, Split{24, 8, 8, 4, 4},
                                           Split{72, 72, 4, 4, 4}, Split{72, 8, 4, 4, 4},
                                           Split{15, 5, 4, 2, 1}, Split{36, 12, 2, 2, 2},
                                           Split{16, 1, 4, 4, 1}, Split{12, 6, 8, 3, 4}),
                         [](const ::testing::TestParamInfo<Split>& split) {
                           return fmt::format("P{}_lsa{}_S{}_gmin{}", split.param.num_ranks,
                                              split.param.lsa_size, split.param.num_slots,
                                              split.param.g_min);
                         });

TEST(Teams, AHotTeamFillsUpToItsOwnMean) {
  // 1,600 routes of expert 0 (owner 0): with one team of 16 they spread to T = 100 per rank;
  // with 2 x 8 they stay in ranks 0..7, whose water level is the team's mean, 200 (not T, which
  // would leave 900 on the owner).
  CountMatrix counts(16, 64);
  for (int r = 0; r < 16; ++r) counts.at(r, 0) = 100;
  for (const int lsa_size : {16, 8}) {
    const Topology topo = Topology::make(16, 64, 4, 4, lsa_size);
    for (const std::string name : {"halo-q", "iser", "p2p"}) {
      const auto policy = make_policy(name, topo, {});
      const PolicyResult result = policy->plan(counts);
      ASSERT_FALSE(result.plan.broadcasts.empty()) << name;
      EXPECT_EQ(test_util::team_plan_failure(topo, counts, *policy, result), "");
      const int32_t max_load =
          *std::max_element(result.plan.loads.begin(), result.plan.loads.end());
      EXPECT_EQ(max_load, 1600 / lsa_size) << name << " lsa_size " << lsa_size;
      for (const Broadcast& b : result.plan.broadcasts) {
        EXPECT_LE(b.group_begin + b.group_size, lsa_size) << name;
      }
    }
  }
}

}  // namespace
}  // namespace iser
