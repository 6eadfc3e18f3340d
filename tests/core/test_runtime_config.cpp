// CPU half of the runtime: configuration checks, fingerprints, copy lists, region layout, who
// writes which slices of an op, and the multicast guard + address arithmetic (the multicast path
// is never run on the lent machines).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/writers.h"
#include "iser/error.h"
#include "iser/runtime.h"
#include "runtime/layout.h"

namespace iser {
namespace {

RuntimeConfig small_config() {
  RuntimeConfig c;
  c.num_ranks = 4;
  c.num_experts = 16;
  c.num_slots = 2;
  c.bundle = {50000, 1248};
  return c;
}

void expect_error(const auto& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no iser::Error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RuntimeConfig, BundleLayout) {
  const BundleLayout b{50000, 1248};
  EXPECT_EQ(b.scale_offset(), 50176);  // align_up(50000, 256)
  EXPECT_EQ(b.bytes(), 50176 + 1248);
  EXPECT_EQ(b.slot_stride(), 53248);  // align_up(51424, 4096)
  EXPECT_EQ(b.num_slices(), 7);       // ceil(51424 / 8192)
  const BundleLayout paper{37'158'912, 0};
  EXPECT_EQ(paper.num_slices(), 4536);
  expect_error([] { BundleLayout{50001, 0}.validate(); }, "weight_bytes = 50001");
  expect_error([] { BundleLayout{0, 0}.validate(); }, "weight_bytes = 0");
  expect_error([] { BundleLayout{16, 8}.validate(); }, "scale_bytes = 8");
}

TEST(RuntimeConfig, ValidateNamesTheField) {
  RuntimeConfig c = small_config();
  c.validate();
  c.num_experts = 18;
  expect_error([&] { c.validate(); }, "num_experts = 18");
  c = small_config();
  c.num_banks = 3;
  expect_error([&] { c.validate(); }, "num_banks = 3");
  c = small_config();
  c.copy_sms = 0;
  expect_error([&] { c.validate(); }, "copy_sms = 0");
  c = small_config();
  c.copy_warps = 17;
  expect_error([&] { c.validate(); }, "copy_warps = 17");
  c = small_config();
  c.copy_warps = 8;
  c.copy_stages = 3;
  expect_error([&] { c.validate(); }, "copy_warps x copy_stages = 8 x 3");
  c.copy_path = CopyPath::kRegisters;  // no shared-memory stages
  c.validate();
  c.copy_stages = 23;
  expect_error([&] { c.validate(); }, "copy_stages = 23");
  c = small_config();
  c.host_path = CopyPath::kRegisters;
  c.validate();
  c.host_path = static_cast<CopyPath>(7);
  expect_error([&] { c.validate(); }, "host_path = 7");
}

TEST(RuntimeConfig, FingerprintMismatchNamesRankAndField) {
  const RuntimeConfig c = small_config();
  std::vector<ConfigFingerprint> all(4, fingerprint(c));
  check_fingerprints(all);
  all[2].num_slots = 3;
  expect_error([&] { check_fingerprints(all); }, "rank 2 presents num_slots (S) = 3");
  all[2] = fingerprint(c);
  all[3].scale_bytes = 0;
  expect_error([&] { check_fingerprints(all); }, "rank 3 presents bundle scale_bytes = 0");
  all[3] = fingerprint(c);
  all[1].version = kRuntimeVersion + 1;
  expect_error([&] { check_fingerprints(all); }, "rank 1 presents version");
  all[1].version = -1;
  expect_error([&] { check_fingerprints(all); }, "rank 1 rejected its own configuration");
}

TEST(RuntimeConfig, CopyListFromPlan) {
  Plan plan;
  Broadcast a;
  a.expert = 5;
  a.owner = 1;
  a.group_begin = 0;
  a.group_size = 4;
  a.helper = 1;
  a.mode = TransportMode::kSami;
  Broadcast b = a;
  b.expert = 14;
  b.owner = 3;
  b.group_begin = 2;
  b.group_size = 2;
  b.helper = 0;
  b.mode = TransportMode::kPointToPoint;
  plan.broadcasts = {a, b};
  const auto ops = make_copy_list(plan);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].mode, TransportMode::kSami);
  EXPECT_EQ(ops[1].mode, TransportMode::kOwnerDirect);
  EXPECT_EQ(ops[1].group_begin, 2);
  const RuntimeConfig c = small_config();
  validate_copy_list(c, ops);
  auto bad = ops;
  bad[1].helper = 1;  // rank 2 and 3 already hold helper 1 from op 0
  expect_error([&] { validate_copy_list(c, bad); }, "reuses helper 1 of rank 2");
  bad = ops;
  bad[0].owner = 2;
  expect_error([&] { validate_copy_list(c, bad); }, "op 0 owner = 2");
  bad = ops;
  bad[1].group_size = 3;
  expect_error([&] { validate_copy_list(c, bad); }, "group [2, 5)");
}

TEST(RuntimeConfig, RegionLayoutIsAlignedAndDisjoint) {
  RuntimeConfig c = small_config();
  c.num_layers = 3;
  c.num_banks = 2;
  const runtime::RegionLayout l = runtime::make_region_layout(c);
  EXPECT_EQ(l.count_row(1, 3) - l.count_rows, (1 * 4 + 3) * 16 * 4);
  EXPECT_GE(l.count_flags, l.count_row(1, 3) + int64_t{16} * 4);
  EXPECT_GE(l.count_stamps, l.count_flags + int64_t{4} * 8);
  EXPECT_GE(l.ready_flags, l.count_stamps + int64_t{2} * 4 * 8);
  EXPECT_GE(l.consumed_flags, l.ready_flags + int64_t{4} * 8);
  EXPECT_GE(l.home, l.consumed_flags + int64_t{4} * 8);
  EXPECT_EQ(l.home % kSlotAlignment, 0);
  EXPECT_EQ(l.home_slot(2, 3), l.home + (int64_t{2} * 4 + 3) * 53248);
  EXPECT_EQ(l.helper, l.home + int64_t{3} * 4 * 53248);
  EXPECT_EQ(l.helper_slot(1, 1), l.helper + int64_t{3} * 53248);
  EXPECT_GE(l.total, l.helper + int64_t{2} * 2 * 53248);
  EXPECT_EQ(l.total % (2 << 20), 0);
}

TEST(Multicast, RefusedUnlessNvlsIsEnabled) {
  const char* saved = std::getenv("NCCL_NVLS_ENABLE");
  const std::string saved_value = saved ? saved : "";
  std::string reason;
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  EXPECT_FALSE(multicast_allowed(&reason));
  EXPECT_NE(reason.find("NCCL_NVLS_ENABLE=0"), std::string::npos) << reason;
  ::unsetenv("NCCL_NVLS_ENABLE");
  EXPECT_FALSE(multicast_allowed(&reason));
  ::setenv("NCCL_NVLS_ENABLE", "1", 1);
  EXPECT_TRUE(multicast_allowed(&reason));
  if (saved) {
    ::setenv("NCCL_NVLS_ENABLE", saved_value.c_str(), 1);
  } else {
    ::unsetenv("NCCL_NVLS_ENABLE");
  }
}

TEST(Multicast, AddressArithmetic) {
  RuntimeConfig c = small_config();
  c.num_banks = 2;
  // The object mirrors the helper banks: [bank][helper] slots of slot_stride, 8-KiB slices.
  EXPECT_EQ(multicast_offset(c, 0, 0, 0), 0);
  EXPECT_EQ(multicast_offset(c, 0, 1, 2), 53248 + 2 * 8192);
  EXPECT_EQ(multicast_offset(c, 1, 1, 6), (2 + 1) * 53248 + 6 * 8192);
  const runtime::RegionLayout l = runtime::make_region_layout(c);
  for (int bank = 0; bank < 2; ++bank) {
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(multicast_offset(c, bank, h, 3),
                l.helper_slot(bank, h) - l.helper + int64_t{3} * 8192);
    }
  }
  expect_error([&] { multicast_offset(c, 0, 0, 7); }, "slice = 7");
  expect_error([&] { multicast_offset(c, 2, 0, 0); }, "bank = 2");
  // Aligned groups of 8 ranks, coarse to fine: [0,8) -> 0; [0,4),[4,8) -> 1,2; pairs -> 3..6.
  EXPECT_EQ(multicast_group_index(8, 0, 8), 0);
  EXPECT_EQ(multicast_group_index(8, 4, 4), 2);
  EXPECT_EQ(multicast_group_index(8, 6, 2), 6);
  EXPECT_EQ(multicast_group_index(8, 7, 1), 14);
  expect_error([&] { multicast_group_index(8, 2, 4); }, "not aligned");
  expect_error([&] { multicast_group_index(12, 0, 4); }, "power-of-two");
}

TEST(RuntimeConfig, TransportNames) {
  for (Transport t : {Transport::kP2PDirect, Transport::kP2PSami, Transport::kP2PSamiOwner,
                      Transport::kP2PSamiHost, Transport::kCopyEngine, Transport::kPlan}) {
    EXPECT_EQ(transport_from_string(to_string(t)), t);
  }
  expect_error([] { transport_from_string("multicast"); }, "not offered");
  EXPECT_EQ(to_string(Transport::kP2PSamiOwner), "p2p-sami-owner");
  EXPECT_EQ(to_string(Transport::kP2PSamiHost), "p2p-sami-host");
  expect_error([] { transport_from_string("nvls"); }, "'nvls'");
}

// Every slice of an op is moved by exactly one writer, and the writers are: the owner (direct);
// the members, member i moving j = i (mod g) (SAMI); the members and an owner outside the group
// as writer g, slices j = i (mod g + 1) (owner-assisted SAMI; inside: plain SAMI). Slice counts
// 1..10 and 129 (fewer slices than writers, and a partial last slice in the bundles of the GPU
// tests), groups of 1, 2 and 4 of 8 ranks, every owner.
TEST(RuntimeWriters, EverySliceHasOneWriter) {
  constexpr int kRanks = 8;
  for (TransportMode mode :
       {TransportMode::kOwnerDirect, TransportMode::kSami, TransportMode::kSamiOwner}) {
    for (int g : {1, 2, 4}) {
      for (int begin = 0; begin + g <= kRanks; begin += g) {
        for (int owner = 0; owner < kRanks; ++owner) {
          const CopyOp op{owner * 3, owner, begin, g, 0, mode};
          const bool inside = owner >= begin && owner < begin + g;
          // The writers in writer order, as the modes define them.
          std::vector<int> writers;
          if (mode == TransportMode::kOwnerDirect) {
            writers = {owner};
          } else {
            for (int m = begin; m < begin + g; ++m) writers.push_back(m);
            if (mode == TransportMode::kSamiOwner && !inside) writers.push_back(owner);
          }
          for (int64_t n : {1, 2, 3, 4, 5, 7, 10, 129}) {
            std::vector<int> mover(n, -1);
            for (int r = 0; r < kRanks; ++r) {
              const runtime::OpWriter w = runtime::op_writer(op, mode, r);
              const auto pos = std::find(writers.begin(), writers.end(), r);
              const std::string what = "mode " + std::string(to_string(mode)) + " group [" +
                                       std::to_string(begin) + ", " + std::to_string(begin + g) +
                                       ") owner " + std::to_string(owner) + " rank " +
                                       std::to_string(r) + " slices " + std::to_string(n);
              if (pos == writers.end()) {
                EXPECT_EQ(w.idx, -1) << what;
                EXPECT_EQ(runtime::writer_slice_count(w, n), 0) << what;
                continue;
              }
              ASSERT_EQ(w.idx, pos - writers.begin()) << what;
              ASSERT_EQ(w.count, static_cast<int32_t>(writers.size())) << what;
              const int64_t count = runtime::writer_slice_count(w, n);
              int64_t want_count = 0;
              for (int64_t j = 0; j < n; ++j) want_count += j % w.count == w.idx;
              EXPECT_EQ(count, want_count) << what;
              for (int64_t t = 0; t < count; ++t) {
                const int64_t j = runtime::writer_slice_index(w, t);
                ASSERT_TRUE(j >= 0 && j < n) << what << " task " << t;
                EXPECT_EQ(mover[j], -1) << what << ": slice " << j << " moved twice";
                mover[j] = r;
              }
            }
            for (int64_t j = 0; j < n; ++j) {
              EXPECT_NE(mover[j], -1)
                  << "mode " << to_string(mode) << " owner " << owner << " group [" << begin << ", "
                  << begin + g << "): slice " << j << " of " << n << " never moved";
            }
          }
        }
      }
    }
  }
  // The transport override wins over the op's own mode; -1 keeps it.
  const CopyOp op{0, 0, 1, 1, 0, TransportMode::kOwnerDirect};
  EXPECT_EQ(runtime::effective_mode(op, runtime::kNoModeOverride), TransportMode::kOwnerDirect);
  EXPECT_EQ(runtime::effective_mode(op, runtime::mode_override_of(TransportMode::kSamiOwner)),
            TransportMode::kSamiOwner);
}

TEST(RuntimeConfig, CopyListAcceptsOwnerAssistedSami) {
  const RuntimeConfig c = small_config();  // H = 4
  validate_copy_list(c, std::vector<CopyOp>{{1, 0, 2, 2, 0, TransportMode::kSamiOwner}});
  expect_error(
      [&] {
        validate_copy_list(c, std::vector<CopyOp>{{1, 0, 2, 2, 0, TransportMode::kPointToPoint}});
      },
      "op 0 mode = 2 (0 owner-direct, 1 SAMI, 3 owner-assisted SAMI)");
}

}  // namespace
}  // namespace iser
