// The register repair's seat arithmetic (plan_repair.cuh: seat_first, seat_second, rotate_ring)
// against the circle method of docs/design.md §4.4 (repair.cpp), on the host: the pairs each phase
// trades, in order, for 2, 4, 6 and 8 seats, and every value back at its rank's position after
// the 2 (seats - 1) phases. Needs no GPU (it runs in CI); the GPU tests compare the plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "cuda/plan_repair.cuh"

namespace iser::cuda::plan_detail {
namespace {

using Phases = std::vector<std::vector<std::pair<int, int>>>;

// docs/design.md §4.4: ring = [1 .. seats - 1]; a phase pairs (0, ring[0]) and (ring[w], ring[seats
// - 1
// - w]) for w = 1 .. seats / 2 - 1, then rotates the ring right by one; 2 (seats - 1) phases.
Phases circle_method(int seats) {
  std::vector<int> ring(seats - 1);
  std::iota(ring.begin(), ring.end(), 1);
  Phases phases;
  for (int phase = 0; phase < 2 * (seats - 1); ++phase) {
    std::vector<std::pair<int, int>> pairs = {{0, ring[0]}};
    for (int w = 1; w <= seats / 2 - 1; ++w) pairs.emplace_back(ring[w], ring[seats - 1 - w]);
    phases.push_back(pairs);
    std::rotate(ring.begin(), ring.end() - 1, ring.end());
  }
  return phases;
}

// The ranks whose values the register layout trades: rank_at[position], rotated after a phase.
template <int kSeats>
Phases register_layout(bool& back_home) {
  int rank_at[kSeats];
  std::iota(rank_at, rank_at + kSeats, 0);
  Phases phases;
  for (int phase = 0; phase < 2 * (kSeats - 1); ++phase) {
    std::vector<std::pair<int, int>> pairs;
    for (int j = 0; j < kSeats / 2; ++j) {
      pairs.emplace_back(rank_at[seat_first(j)], rank_at[seat_second<kSeats>(j)]);
    }
    phases.push_back(pairs);
    if constexpr (kSeats > 2) rotate_ring(rank_at);
  }
  back_home = true;
  for (int r = 0; r < kSeats; ++r) back_home = back_home && rank_at[r] == r;
  return phases;
}

template <int kSeats>
void expect_circle_method() {
  bool back_home = false;
  EXPECT_EQ(register_layout<kSeats>(back_home), circle_method(kSeats)) << kSeats << " seats";
  EXPECT_TRUE(back_home) << kSeats << " seats";
}

TEST(RegisterRepairSeats, PairsFollowTheCircleMethod) {
  expect_circle_method<2>();
  expect_circle_method<4>();
  expect_circle_method<6>();
  expect_circle_method<8>();  // not instantiated by the kernel (kRegisterRepairMaxRanks = 6)
}

}  // namespace
}  // namespace iser::cuda::plan_detail
