// The protocol stress harness (protocol_stress.h) over every transport but multicast, both copy
// paths and 1 or 2 helper banks: zero byte mismatches in validated slots, exact slot maps and
// count matrices, and READY/fallback counters that add up. ISER_STRESS_GENERATIONS sets the
// generations per configuration (default 200; the GPU machine runs 10,000); ISER_TEST_SHORT
// (compute-sanitizer) runs a few on one stream.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "protocol_stress.h"

namespace iser::testing {
namespace {

std::vector<StressConfig> stress_configs() {
  std::vector<StressConfig> out;
  uint32_t seed = 11;
  const auto add = [&](Transport t, CopyPath path, int banks, int ranks, bool coupled) {
    StressConfig c;
    c.transport = t;
    c.path = path;
    c.num_banks = banks;
    c.num_ranks = ranks;
    c.coupled = coupled;
    c.host_share = t == Transport::kP2PSamiHost ? 0.5 : 0.0;
    c.seed = seed++;
    out.push_back(c);
  };
  for (const Transport t :
       {Transport::kP2PDirect, Transport::kP2PSami, Transport::kPlan, Transport::kP2PSamiOwner,
        Transport::kP2PSamiHost, Transport::kCopyEngine}) {
    for (const CopyPath path : {CopyPath::kBulk, CopyPath::kRegisters}) {
      if (t == Transport::kCopyEngine && path == CopyPath::kRegisters) continue;  // no SM copy
      for (const int banks : {1, 2}) add(t, path, banks, 4, true);
    }
  }
  for (const int banks : {1, 2}) add(Transport::kPlan, CopyPath::kBulk, banks, 8, true);
  // Writers free to run ahead of the gates: a few transports.
  for (const int banks : {1, 2}) {
    add(Transport::kPlan, CopyPath::kBulk, banks, 4, false);
    add(Transport::kP2PDirect, CopyPath::kRegisters, banks, 4, false);
    add(Transport::kP2PSamiHost, CopyPath::kBulk, banks, 4, false);
    add(Transport::kPlan, CopyPath::kBulk, banks, 8, false);
  }
  return out;
}

class ProtocolStressTest : public ::testing::TestWithParam<StressConfig> {};

TEST_P(ProtocolStressTest, ValidatedSlotsHoldTheirOwnersBytes) {
  ISER_REQUIRE_GPUS(1);
  StressConfig config = GetParam();
  config.one_stream = std::getenv("ISER_TEST_SHORT") != nullptr;
  const int64_t generations = stress_generations(200);
  ProtocolStress stress(config);
  const StressResult r = stress.run(generations);
  std::printf(
      "stress %s: %lld generations, %llu slot checks (%llu planned, %llu refused), %llu "
      "mismatching 16-byte words, %llu fallback routes (%llu expected)\n",
      config.name().c_str(), static_cast<long long>(r.generations),
      static_cast<unsigned long long>(r.validated),
      static_cast<unsigned long long>(r.planned_slots),
      static_cast<unsigned long long>(r.invalidated_slots),
      static_cast<unsigned long long>(r.mismatches),
      static_cast<unsigned long long>(r.fallback_routes),
      static_cast<unsigned long long>(r.expected_fallback_routes));
  EXPECT_EQ(r.generations, generations);
  EXPECT_EQ(r.mismatches, 0u) << "a validated helper slot differed from its owner's bundle";
  EXPECT_EQ(r.validated, r.mapped_slots) << "the consumer checked other slots than the gate's";
  EXPECT_EQ(r.mapped_slots + r.invalidated_slots, r.planned_slots);
  if (config.coupled) {
    EXPECT_EQ(r.invalidated_slots, 0u);
  }
  EXPECT_EQ(r.fallback_routes, r.expected_fallback_routes);
  EXPECT_EQ(r.matrix_errors, 0);
  EXPECT_EQ(r.gate_errors, 0);
  EXPECT_EQ(r.route_errors, 0);
  EXPECT_EQ(r.flag_errors, 0);
  for (const std::string& s : r.statuses) ADD_FAILURE() << s;
}

INSTANTIATE_TEST_SUITE_P(Configs, ProtocolStressTest, ::testing::ValuesIn(stress_configs()),
                         [](const ::testing::TestParamInfo<StressConfig>& param_info) {
                           std::string name = param_info.param.name();
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace iser::testing
