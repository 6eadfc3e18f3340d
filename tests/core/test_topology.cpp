#include <gtest/gtest.h>

#include "iser/error.h"
#include "iser/topology.h"

namespace iser {
namespace {

TEST(Topology, LevelsFollowTheAlignedGroupRule) {
  // docs/design.md §3: level l >= 1 exists while 2^l | P and P >> l >= g_min (= 4).
  EXPECT_EQ(Topology::make(8, 384, 4).group_sizes(), (std::vector<int>{8, 4}));
  EXPECT_EQ(Topology::make(24, 384, 4).group_sizes(), (std::vector<int>{24, 12, 6}));
  EXPECT_EQ(Topology::make(6, 384, 4).group_sizes(), (std::vector<int>{6}));
  EXPECT_EQ(Topology::make(2, 384, 4).group_sizes(), (std::vector<int>{2}));
  EXPECT_EQ(Topology::make(16, 384, 4).group_sizes(), (std::vector<int>{16, 8, 4}));
  EXPECT_EQ(Topology::make(64, 384, 4).group_sizes(), (std::vector<int>{64, 32, 16, 8, 4}));
  EXPECT_EQ(Topology::make(3, 384, 4).group_sizes(), (std::vector<int>{3}));
  EXPECT_EQ(Topology::make(8, 384, 4, 2).group_sizes(), (std::vector<int>{8, 4, 2}));
  EXPECT_EQ(Topology::make(2, 384, 4, 1).group_sizes(), (std::vector<int>{2, 1}));
}

TEST(Topology, SlotsAndOwners) {
  const auto topo = Topology::make(4, 16, 2);  // H = 4, H + S = 6
  EXPECT_EQ(topo.experts_per_rank(), 4);
  EXPECT_EQ(topo.slots_per_rank(), 6);
  EXPECT_EQ(topo.total_slots(), 24);
  EXPECT_EQ(topo.owner_of(9), 2);
  EXPECT_EQ(topo.home_slot(9), 2 * 6 + 1);
  EXPECT_EQ(topo.helper_slot(3, 1), 3 * 6 + 4 + 1);
  EXPECT_EQ(topo.max_exports_per_owner(), 2);
  EXPECT_EQ(Topology::make(4, 8, 5).max_exports_per_owner(), 2);  // C = min(S, H)
}

TEST(Topology, RejectsBadShapesWithClearErrors) {
  EXPECT_THROW(Topology::make(1, 8, 2), Error);
  EXPECT_THROW(Topology::make(3, 8, 2), Error);   // P does not divide E
  EXPECT_THROW(Topology::make(4, 8, -1), Error);  // S < 0
  EXPECT_THROW(Topology::make(4, 0, 2), Error);
  try {
    Topology::make(3, 8, 2);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("P must divide E"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace iser
