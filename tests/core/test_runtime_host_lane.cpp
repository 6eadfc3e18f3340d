// CPU half of the p2p-sami-host transport (cuda/host_lane.h): the slice split between the
// NVLink writers and the host lane, the staging layout, and the configuration checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/host_lane.h"
#include "cuda/writers.h"
#include "iser/error.h"
#include "iser/runtime.h"
#include "runtime/layout.h"

namespace iser {
namespace {

using runtime::HostRole;

// Every member of an op receives every slice exactly once: the head from the p2p-sami-owner
// writers (each NVLink slice stored to every member), the tail from the host lane (the owner
// stages each chunk once and copies it into its own slot when it is a member; every other member
// fetches each chunk once); the chunks tile the tail exactly. Slice counts 1..10, 129 and 4536
// (the paper's 37.16 MB bundle), shares 0..1, groups of 1, 2 and 4 of 8 ranks, every owner.
TEST(RuntimeHostLane, EverySliceReachesEveryMemberOnce) {
  constexpr int kRanks = 8;
  constexpr TransportMode kMode =
      TransportMode::kSamiOwner;  // what p2p-sami-host runs every op under
  for (int g : {1, 2, 4}) {
    for (int begin = 0; begin + g <= kRanks; begin += g) {
      for (int owner = 0; owner < kRanks; ++owner) {
        const CopyOp op{owner * 3, owner, begin, g, 0, TransportMode::kSami};
        for (int64_t n : {1, 2, 3, 4, 5, 7, 10, 129, 4536}) {
          for (double share : {0.0, 0.01, 0.05, 0.1, 0.12, 0.25, 0.5, 0.99, 1.0}) {
            const int64_t host = runtime::host_lane_slices(n, share);
            const int64_t head = runtime::nvlink_slices(n, host);
            const std::string what = "group [" + std::to_string(begin) + ", " +
                                     std::to_string(begin + g) + ") owner " +
                                     std::to_string(owner) + " slices " + std::to_string(n) +
                                     " share " + std::to_string(share);
            ASSERT_GE(host, 0) << what;
            ASSERT_LE(host, n) << what;
            EXPECT_LE(std::abs(static_cast<double>(host) - share * static_cast<double>(n)), 0.5)
                << what;
            std::vector<std::vector<int>> got(kRanks, std::vector<int>(n, 0));
            std::vector<int> staged(runtime::host_lane_chunks(host), 0);
            for (int r = 0; r < kRanks; ++r) {
              const runtime::OpWriter w = runtime::op_writer(op, kMode, r);
              const int64_t count = runtime::nvlink_slice_count(op, kMode, r, n, host);
              EXPECT_EQ(count, runtime::writer_slice_count(w, head)) << what;
              for (int64_t t = 0; t < count; ++t) {
                const int64_t j = runtime::writer_slice_index(w, t);
                ASSERT_TRUE(j >= 0 && j < head) << what << " rank " << r << " task " << t;
                for (int m = begin; m < begin + g; ++m) ++got[m][j];
              }
              const HostRole role = runtime::host_role(op, r, host);
              const bool member = r >= begin && r < begin + g;
              if (host == 0) {
                EXPECT_EQ(role, HostRole::kNone) << what;
                // Share 0 is exactly p2p-sami-owner: the same writers move the same slices.
                EXPECT_EQ(count, runtime::writer_slice_count(w, n)) << what;
                continue;
              }
              EXPECT_EQ(role, r == owner ? HostRole::kStage
                              : member   ? HostRole::kFetch
                                         : HostRole::kNone)
                  << what << " rank " << r;
              for (int64_t c = 0; c < runtime::host_lane_chunks(host); ++c) {
                const int64_t first = c * runtime::kHostChunkSlices;
                const int64_t end = std::min(first + runtime::kHostChunkSlices, host);
                ASSERT_LT(first, end) << what << " chunk " << c << " is empty";
                if (role == HostRole::kStage) ++staged[c];
                if (role == HostRole::kFetch || (role == HostRole::kStage && member)) {
                  for (int64_t s = first; s < end; ++s) ++got[r][head + s];
                }
              }
            }
            for (int64_t c = 0; c < runtime::host_lane_chunks(host); ++c) {
              EXPECT_EQ(staged[c], 1) << what << ": chunk " << c;
            }
            for (int m = 0; m < kRanks; ++m) {
              const bool member = m >= begin && m < begin + g;
              for (int64_t j = 0; j < n; ++j) {
                ASSERT_EQ(got[m][j], member ? 1 : 0) << what << ": rank " << m << " received slice "
                                                     << j << " " << got[m][j] << " times";
              }
            }
          }
        }
      }
    }
  }
  // A null op (the padding of a device copy list) has no host lane.
  EXPECT_EQ(runtime::host_role(CopyOp{0, 0, 0, 0, 0, TransportMode::kOwnerDirect}, 0, 10),
            HostRole::kNone);
}

// Areas (bank, helper, group_begin) are disjoint and inside the allocation; flags follow all
// data; the capacity follows the configured share.
TEST(RuntimeHostLane, StagingLayoutIsDisjoint) {
  RuntimeConfig c;
  c.num_ranks = 4;
  c.num_experts = 16;
  c.num_slots = 3;
  c.num_banks = 2;
  c.bundle = {(1 << 20) + 16, 4096 + 48};  // 129 slices
  c.host_share = 0.25;
  const runtime::StagingLayout s = runtime::make_staging_layout(c);
  ASSERT_EQ(s.capacity, 32);
  ASSERT_EQ(s.chunks_per_area(), 8);
  EXPECT_EQ(s.num_areas(), 2 * 3 * 4);
  int64_t expected_area = 0;
  for (int bank = 0; bank < 2; ++bank) {
    for (int helper = 0; helper < 3; ++helper) {
      for (int begin = 0; begin < 4; ++begin) {
        const int64_t a = s.area(bank, helper, begin);
        EXPECT_EQ(a, expected_area++);
        EXPECT_EQ(s.data(a, 0), a * 32 * kSliceBytes);
        EXPECT_EQ(s.data(a, 31) + kSliceBytes, (a + 1) * 32 * kSliceBytes);
        EXPECT_GE(s.flag(a, 0), s.num_areas() * 32 * kSliceBytes);
        EXPECT_EQ(s.flag(a, 7) + 8, s.flag(a, 0) + 8 * 8);
      }
    }
  }
  EXPECT_GE(s.total(), s.flag(s.num_areas() - 1, 7) + 8);
  EXPECT_EQ(s.total() % 4096, 0);
  c.host_share = 0.0;
  EXPECT_EQ(runtime::make_staging_layout(c).capacity, 0);
}

TEST(RuntimeHostLane, ConfigurationChecks) {
  RuntimeConfig c;
  c.num_ranks = 2;
  c.num_experts = 4;
  c.num_slots = 1;
  c.bundle = {8192 * 10, 0};
  c.host_share = 1.5;
  try {
    c.validate();
    ADD_FAILURE() << "host_share 1.5 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host_share = 1.5"), std::string::npos) << e.what();
  }
  c.host_share = 0.2;
  c.host_sms = 0;
  EXPECT_THROW(c.validate(), Error);
  c.host_sms = 4;
  c.validate();
  // Ranks must agree on the staging capacity.
  std::vector<ConfigFingerprint> f = {fingerprint(c), fingerprint(c)};
  EXPECT_EQ(f[0].host_slices, 2);
  c.host_share = 0.3;
  f[1] = fingerprint(c);
  try {
    check_fingerprints(f);
    ADD_FAILURE() << "different host shares accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host-lane slices (host_share) = 3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace iser
