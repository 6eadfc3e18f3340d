#include <gtest/gtest.h>

#include <algorithm>

#include "iser/error.h"
#include "iser/policy.h"
#include "iser/validator.h"

namespace iser {
namespace {

// P = 8, E = 16 (H = 2), S = 2: levels 0 (group of 8) and 1 (groups of 4).
// Expert 0 (owner 0) has 80 routes from rank 0; everything else 10 routes on its owner.
struct Fixture {
  Topology topo = Topology::make(8, 16, 2);
  CountMatrix counts{8, 16};
  Plan plan;
  Fixture() {
    counts.at(0, 0) = 80;
    for (int e = 1; e < 16; ++e) counts.at(topo.owner_of(e), e) = 10;
    plan = make_empty_plan(topo, counts);  // loads: rank 0 = 90, others 20; T = 30
    // Broadcast expert 0 to group [0, 4) at level 1, helper 0: quotas 30/20/15/15.
    Broadcast b;
    b.expert = 0;
    b.owner = 0;
    b.level = 1;
    b.group_begin = 0;
    b.group_size = 4;
    b.helper = 0;
    b.mode = TransportMode::kOwnerDirect;
    b.quota = {30, 20, 15, 15, 0, 0, 0, 0};
    plan.broadcasts.push_back(b);
    plan.loads = {40, 40, 35, 35, 20, 20, 20, 20};
  }
  bool has(const std::string& needle) const {
    const auto v = validate_plan(topo, counts, plan);
    return std::any_of(v.begin(), v.end(),
                       [&](const std::string& s) { return s.find(needle) != std::string::npos; });
  }
};

TEST(Validator, AcceptsAValidPlan) {
  Fixture f;
  EXPECT_TRUE(validate_plan(f.topo, f.counts, f.plan).empty());
  EXPECT_NO_THROW(check_plan(f.topo, f.counts, f.plan));
  EXPECT_TRUE(validate_plan(f.topo, f.counts, make_empty_plan(f.topo, f.counts)).empty());
}

TEST(Validator, QuotaSumAndSign) {
  Fixture f;
  f.plan.broadcasts[0].quota[1] = 19;
  f.plan.loads[1] = 39;
  EXPECT_TRUE(f.has("quotas sum to 79"));
  Fixture g;
  g.plan.broadcasts[0].quota = {30, 40, -5, 15, 0, 0, 0, 0};
  g.plan.loads = {40, 60, 15, 35, 20, 20, 20, 20};
  EXPECT_TRUE(g.has("negative quota -5 on rank 2"));
}

TEST(Validator, QuotaOffTheHosts) {
  Fixture f;
  f.plan.broadcasts[0].quota = {30, 20, 15, 0, 15, 0, 0, 0};
  f.plan.loads = {40, 40, 35, 20, 35, 20, 20, 20};
  EXPECT_TRUE(f.has("rank 4, which is not a host"));
}

TEST(Validator, LoadsMustMatchQuotas) {
  Fixture f;
  f.plan.loads[2] = 36;
  EXPECT_TRUE(f.has("rank 2: plan load 36 differs from the load 35"));
}

TEST(Validator, AlignedGroupsAndLevels) {
  Fixture f;
  f.plan.broadcasts[0].group_begin = 2;  // [2, 6) is not aligned; owner 0 then outside
  f.plan.broadcasts[0].quota = {30, 0, 20, 15, 15, 0, 0, 0};
  f.plan.loads = {40, 20, 40, 35, 35, 20, 20, 20};
  EXPECT_TRUE(f.has("not an aligned group of level 1"));
  EXPECT_TRUE(f.has("owner-direct transport but owner 0 is outside"));
  Fixture g;
  g.plan.broadcasts[0].level = 2;
  EXPECT_TRUE(g.has("level 2 is not an aligned level"));
}

TEST(Validator, HelperSlotsAndMembership) {
  Fixture f;
  Broadcast b = f.plan.broadcasts[0];
  b.expert = 1;  // same owner, same group, same helper: slot clash
  b.quota = {10, 0, 0, 0, 0, 0, 0, 0};
  f.plan.broadcasts.push_back(b);
  f.plan.loads[0] += 0;  // expert 1's 10 routes stay on rank 0 via its quota
  EXPECT_TRUE(f.has("helper 0 on rank 0 already used by broadcast 0"));
  f.plan.broadcasts[1].helper = 1;
  EXPECT_TRUE(validate_plan(f.topo, f.counts, f.plan).empty());
  // A third broadcast on the same ranks exceeds S = 2 groups and min(S, H) = 2 exports.
  Broadcast c = f.plan.broadcasts[0];
  c.expert = 2;
  c.owner = 1;
  c.helper = 1;
  c.quota = {0, 10, 0, 0, 0, 0, 0, 0};
  f.plan.broadcasts.push_back(c);
  EXPECT_TRUE(f.has("rank 1 is a member of 3 groups, more than S = 2"));
  Broadcast d = f.plan.broadcasts[0];
  d.expert = 0;
  f.plan.broadcasts.push_back(d);
  EXPECT_TRUE(f.has("owner 0 exports 3 broadcasts, more than 2"));
  EXPECT_THROW(check_plan(f.topo, f.counts, f.plan), Error);
}

TEST(Validator, HelperIndexRangeAndUniqueExperts) {
  Fixture f;
  f.plan.broadcasts[0].helper = 2;
  EXPECT_TRUE(f.has("helper index 2 out of range [0, 2)"));
  Fixture g;
  Broadcast b = g.plan.broadcasts[0];
  b.group_begin = 4;
  b.quota = {0, 0, 0, 0, 0, 0, 0, 0};
  b.mode = TransportMode::kSami;
  g.plan.broadcasts.push_back(b);
  EXPECT_TRUE(validate_plan(g.topo, g.counts, g.plan).empty());
  ValidationOptions unique;
  unique.unique_experts = true;
  const auto v = validate_plan(g.topo, g.counts, g.plan, unique);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("expert 0 is broadcast 2 times"), std::string::npos);
}

TEST(Validator, FlowsConserveRoutes) {
  Fixture f;
  auto flows = home_flows(f.topo, f.counts);
  EXPECT_TRUE(validate_flows(f.counts, flows).empty());
  flows[0].routes -= 1;
  const auto v = validate_flows(f.counts, flows);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("rank 0 expert 0: flows carry 79 routes, the rank has 80"),
            std::string::npos);
}

}  // namespace
}  // namespace iser
