// The EP layer's GPU-planned mode, on one GPU: the plan -> copy-list kernel writes exactly
// make_copy_list(plan) followed by null ops, refuses (all null, num_ops = -1) a plan whose
// broadcasts leave the topology, and copies nothing from a plan with a non-zero status; the
// GPU planner options cover the HALO-Q family and refuse the rest by name.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/planner/synthetic_counts.h"
#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "gpu/gpu_test_util.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/planner.h"
#include "iser/policy.h"
#include "iser/runtime.h"

namespace iser {
namespace {

using cuda::DeviceBuffer;

// Runs plan_copy_list on `plan_words` (uploaded); returns {num_ops, ops[max_ops]}.
std::pair<int32_t, std::vector<CopyOp>> run_copy_list(const Topology& topo,
                                                      const GpuPlanLayout& layout,
                                                      const std::vector<int32_t>& plan_words) {
  DeviceBuffer plan(plan_words.size() * sizeof(int32_t));
  DeviceBuffer ops(layout.max_broadcasts * sizeof(CopyOp)), num_ops(sizeof(int32_t));
  ISER_CUDA_CHECK(cudaMemcpy(plan.get(), plan_words.data(), plan_words.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice));
  ISER_CUDA_CHECK(cudaMemset(ops.get(), 0x5a, ops.bytes()));  // every entry must be written
  cuda::PlanCopyListParams params;
  params.plan = plan.get<int32_t>();
  params.broadcasts_offset = layout.broadcasts();
  params.max_ops = layout.max_broadcasts;
  params.num_ranks = topo.num_ranks;
  params.experts_per_rank = topo.experts_per_rank();
  params.num_slots = topo.num_slots;
  params.ops = ops.get<CopyOp>();
  params.num_ops = num_ops.get<int32_t>();
  cuda::launch_plan_copy_list(params, nullptr);
  std::pair<int32_t, std::vector<CopyOp>> out{0, std::vector<CopyOp>(layout.max_broadcasts)};
  ISER_CUDA_CHECK(cudaMemcpy(&out.first, num_ops.get(), sizeof(int32_t), cudaMemcpyDeviceToHost));
  ISER_CUDA_CHECK(cudaMemcpy(out.second.data(), ops.get(), ops.bytes(), cudaMemcpyDeviceToHost));
  return out;
}

constexpr int kTokens = 4096;
constexpr int kTopK = 8;

// Skewed counts of P ranks x kTokens tokens x top-kTopK (power-law popularity).
CountMatrix zipf(int num_ranks, int num_experts, uint64_t seed) {
  testing::ZipfOptions z;
  z.num_ranks = num_ranks;
  z.num_experts = num_experts;
  z.tokens_per_rank = kTokens;
  z.top_k = kTopK;
  z.alpha = 0.8 + 0.2 * static_cast<double>(seed % 4);
  z.seed = seed;
  return testing::zipf_counts(z);
}

bool same_op(const CopyOp& a, const CopyOp& b) {
  return std::memcmp(&a, &b, sizeof(CopyOp)) == 0;
}

void expect_null_from(const std::vector<CopyOp>& ops, size_t first, const char* label) {
  for (size_t i = first; i < ops.size(); ++i) {
    const CopyOp& op = ops[i];
    EXPECT_TRUE(op.expert == -1 && op.owner == -1 && op.group_begin == 0 && op.group_size == 0 &&
                op.helper == 0 && op.mode == TransportMode::kOwnerDirect)
        << label << ": entry " << i << " is not a null op";
  }
}

TEST(GpuPlanCopyList, EqualsMakeCopyListThenNullOps) {
  ISER_REQUIRE_GPUS(1);
  struct Case {
    int ranks, experts, slots, g_min;
    const char* policy;
  };
  const Case cases[] = {{2, 16, 2, 2, "halo-q"},      {8, 64, 4, 2, "halo-q"},
                        {8, 256, 4, 1, "owner-home"}, {16, 384, 4, 2, "absorb"},
                        {12, 96, 3, 1, "halo-q"},     {72, 576, 16, 1, "halo-q-owner-in"}};
  int replicated = 0;
  for (const Case& c : cases) {
    const Topology topo = Topology::make(c.ranks, c.experts, c.slots, c.g_min);
    GpuPlanner planner(topo, kTokens * kTopK, gpu_planner_options(c.policy));
    const GpuPlanLayout& layout = planner.layout();
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const CountMatrix counts = zipf(c.ranks, c.experts, seed);
      DeviceBuffer d_counts(counts.data().size() * sizeof(int32_t));
      DeviceBuffer d_plan(static_cast<size_t>(layout.total_words()) * sizeof(int32_t));
      ISER_CUDA_CHECK(cudaMemcpy(d_counts.get(), counts.data().data(), d_counts.bytes(),
                                 cudaMemcpyHostToDevice));
      planner.plan(d_counts.get<int32_t>(), d_plan.get<int32_t>(), nullptr);
      std::vector<int32_t> words(layout.total_words());
      ISER_CUDA_CHECK(
          cudaMemcpy(words.data(), d_plan.get(), d_plan.bytes(), cudaMemcpyDeviceToHost));
      const std::string label =
          fmt::format("{} P{} E{} S{} seed {}", c.policy, c.ranks, c.experts, c.slots, seed);
      ASSERT_EQ(words[GpuPlanLayout::kStatus], 0) << label;
      const Plan plan = plan_from_words(layout, words);
      // The decoded plan is the host policy's plan, bit for bit (the layer's two planners).
      const std::unique_ptr<Policy> policy = make_policy(c.policy, topo);
      EXPECT_EQ(plan, policy->plan(counts).plan) << label;
      const std::vector<CopyOp> expected = make_copy_list(plan);
      const auto [num_ops, ops] = run_copy_list(topo, layout, words);
      ASSERT_EQ(num_ops, static_cast<int32_t>(expected.size())) << label;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(same_op(ops[i], expected[i])) << label << ": op " << i;
      }
      expect_null_from(ops, expected.size(), label.c_str());
      replicated += !expected.empty();
    }
  }
  EXPECT_GT(replicated, 10) << "the counts must be skewed enough to replicate";
}

TEST(GpuPlanCopyList, RefusesOutOfRangeBroadcastsAndFailedPlans) {
  ISER_REQUIRE_GPUS(1);
  const Topology topo = Topology::make(8, 64, 4, 2);
  GpuPlanner planner(topo, kTokens * kTopK);
  const GpuPlanLayout& layout = planner.layout();
  const CountMatrix counts = zipf(8, 64, 7);
  DeviceBuffer d_counts(counts.data().size() * sizeof(int32_t));
  DeviceBuffer d_plan(static_cast<size_t>(layout.total_words()) * sizeof(int32_t));
  ISER_CUDA_CHECK(
      cudaMemcpy(d_counts.get(), counts.data().data(), d_counts.bytes(), cudaMemcpyHostToDevice));
  planner.plan(d_counts.get<int32_t>(), d_plan.get<int32_t>(), nullptr);
  std::vector<int32_t> words(layout.total_words());
  ISER_CUDA_CHECK(cudaMemcpy(words.data(), d_plan.get(), d_plan.bytes(), cudaMemcpyDeviceToHost));
  const int num_broadcasts = words[GpuPlanLayout::kNumBroadcasts];
  ASSERT_GT(num_broadcasts, 0) << "the counts must be skewed enough to replicate";
  const int last = layout.broadcasts() + (num_broadcasts - 1) * GpuPlanLayout::kBroadcastWords;

  const auto refused = [&](std::vector<int32_t> bad, const char* label) {
    const auto [num_ops, ops] = run_copy_list(topo, layout, bad);
    EXPECT_EQ(num_ops, -1) << label;
    expect_null_from(ops, 0, label);
  };
  std::vector<int32_t> bad = words;
  bad[last + GpuPlanLayout::kOwner] = topo.num_ranks;
  refused(bad, "owner = P");
  bad = words;
  bad[last + GpuPlanLayout::kExpert] =
      (words[last + GpuPlanLayout::kExpert] + topo.experts_per_rank()) % topo.num_experts;
  refused(bad, "expert not the owner's");
  bad = words;
  bad[last + GpuPlanLayout::kGroupSize] = topo.num_ranks + 1;
  refused(bad, "group past P");
  bad = words;
  bad[last + GpuPlanLayout::kHelper] = topo.num_slots;
  refused(bad, "helper = S");
  bad = words;
  bad[GpuPlanLayout::kNumBroadcasts] = layout.max_broadcasts + 1;
  refused(bad, "B > max broadcasts");

  // A plan with a status bit copies nothing, whatever its broadcast rows hold.
  bad = words;
  bad[GpuPlanLayout::kStatus] = kGpuPlanOverflow;
  const auto [num_ops, ops] = run_copy_list(topo, layout, bad);
  EXPECT_EQ(num_ops, 0);
  expect_null_from(ops, 0, "status != 0");
}

TEST(GpuPlannerOptionsForPolicy, CoversHaloQFamilyAndRefusesTheRest) {
  EXPECT_FALSE(gpu_planner_options("halo-q").owner_home);
  EXPECT_TRUE(gpu_planner_options("owner-home").owner_home);
  EXPECT_TRUE(gpu_planner_options("absorb").absorb);
  EXPECT_TRUE(gpu_planner_options("halo-q-owner-in").owner_in_group);
  for (const char* name : {"iser", "resident", "eplb", "none", "p2p", "no-such-policy"}) {
    try {
      gpu_planner_options(name);
      ADD_FAILURE() << name << " should be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// gpu_planner_covers (the EP layer's planner = auto) agrees with gpu_planner_options and the
// GpuPlanner limits; host-only, no GPU needed.
TEST(GpuPlannerOptionsForPolicy, CoversMatchesOptionsAndLimits) {
  const Topology topo = Topology::make(8, 384, 4);
  for (const char* name : {"halo-q", "owner-home", "absorb", "halo-q-owner-in"}) {
    EXPECT_TRUE(gpu_planner_covers(name, topo, 8192 * 6)) << name;
  }
  for (const char* name : {"iser", "resident", "eplb", "none", "p2p", "no-such-policy"}) {
    EXPECT_FALSE(gpu_planner_covers(name, topo, 8192 * 6)) << name;
  }
  EXPECT_TRUE(gpu_planner_covers("halo-q", topo, kGpuMaxRoutesPerRank));
  EXPECT_FALSE(gpu_planner_covers("halo-q", topo, int64_t{kGpuMaxRoutesPerRank} + 1));
  EXPECT_FALSE(gpu_planner_covers("halo-q", topo, 0));
  EXPECT_TRUE(gpu_planner_covers("halo-q", Topology::make(kGpuMaxRanks, 720, 2), 1024));
  EXPECT_FALSE(gpu_planner_covers("halo-q", Topology::make(kGpuMaxRanks + 2, 740, 2), 1024));
  EXPECT_FALSE(gpu_planner_covers("halo-q", Topology::make(8, 2048, 2), 1024));
  EXPECT_FALSE(gpu_planner_covers("halo-q", Topology::make(8, 384, kGpuMaxSlots + 1), 1024));
}

}  // namespace
}  // namespace iser
