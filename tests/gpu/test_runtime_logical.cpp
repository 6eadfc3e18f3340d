// Runtime on one GPU with P logical ranks (P = 4, 8, 16): replicas byte-identical to their
// owners' bundles for every transport, SAMI slice ownership, owners outside their group, the
// owner-assisted SAMI transport, the count exchange, READY with nothing to copy and over 1,000
// generations.
#include <gtest/gtest.h>

#include <random>

#include "iser/testing/hooks.h"
#include "runtime_test_util.h"

namespace iser::testing {
namespace {

RuntimeConfig logical_config(int num_ranks, int num_banks = 1) {
  RuntimeConfig c;
  c.num_ranks = num_ranks;
  c.num_experts = num_ranks * 4;
  c.num_slots = 3;
  c.bundle = {50000, 1248};  // 7 slices, the last one partial; scales at 50176
  c.num_layers = 2;
  c.num_banks = num_banks;
  c.copy_sms = 4;
  c.timeout_us = 2'000'000;
  return c;
}

// The other ranks publish `generation` with nothing to copy (the next generation's reuse fence
// waits until every writer of this one finished).
void publish_others(Runtime& rt, int writer, uint64_t generation) {
  if (writer > 0)
    ::iser::testing::replicate_ranks(rt, 0, writer, nullptr, 0, 0, generation, Transport::kPlan,
                                     nullptr);
  if (writer + 1 < rt.num_local_ranks()) {
    ::iser::testing::replicate_ranks(rt, writer + 1, rt.num_local_ranks(), nullptr, 0, 0,
                                     generation, Transport::kPlan, nullptr);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// On every member of `op`, the slices j with mine(j) of its helper slot (bank) hold the owner's
// bytes and every other slice is still poisoned (home layer 0).
template <typename Mine>
void expect_slices_written(Runtime& rt, const CopyOp& op, int bank, Mine&& mine,
                           const std::string& what) {
  const RuntimeConfig& c = rt.config();
  const auto src = bundle_pattern(c, op.owner, 0, op.expert % c.experts_per_rank());
  for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
    const auto got = read_device(rt.helper_slot(m, bank, op.helper), c.bundle.slot_stride());
    for (int64_t j = 0; j < c.bundle.num_slices(); ++j) {
      const int64_t begin = j * kSliceBytes;
      const int64_t end = std::min<int64_t>(begin + kSliceBytes, c.bundle.bytes());
      const bool equal = std::equal(got.begin() + begin, got.begin() + end, src.begin() + begin);
      const bool poisoned = std::all_of(got.begin() + begin, got.begin() + end,
                                        [](uint8_t b) { return b == kPoison; });
      EXPECT_TRUE(mine(j) ? equal : poisoned)
          << what << ": member " << m << " slice " << j
          << (mine(j) ? " should be copied" : " should be untouched");
    }
  }
}

class LogicalRanks : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ISER_REQUIRE_GPUS(1);
    ISER_EXPECT_CUDA(cudaSetDevice(0));
    ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// Every transport, random plans (owners inside and outside their groups, both modes).
TEST_P(LogicalRanks, ReplicasMatchOwnersForEveryTransport) {
  const RuntimeConfig c = logical_config(GetParam());
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  std::mt19937 rng(1234 + GetParam());
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_slots);
  uint64_t generation = 0;
  for (const TestCopyShape& shape : kTestCopyShapes) {
    rt->set_copy_shape(shape.path, shape.warps, shape.stages);
    const std::string what = shape.name();
    for (Transport t :
         {Transport::kPlan, Transport::kP2PDirect, Transport::kP2PSami, Transport::kCopyEngine}) {
      if (t == Transport::kCopyEngine && (shape.path != CopyPath::kBulk || shape.warps != 0)) {
        continue;  // no SM copy: once is enough
      }
      for (int round = 0; round < 3; ++round) {
        ++generation;
        const int layer = static_cast<int>(generation % 2);
        const std::vector<CopyOp> ops = random_ops(c, rng, 4 * c.num_slots);
        poison_helpers(*rt);
        DeviceVector<CopyOp> device_ops(ops);
        if (t == Transport::kCopyEngine) {
          rt->replicate_copy_engine(ops, layer, generation, stream_);
        } else {
          rt->replicate(device_ops.get(), static_cast<int>(ops.size()), layer, generation, t,
                        stream_, 1 + round * 3);
        }
        rt->ready_gate(device_ops.get(), static_cast<int>(ops.size()), generation,
                       slot_expert.get(), stream_, t);
        ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
        rt->check_status();
        expect_bank(*rt, ops, layer, 0, (std::string(to_string(t)) + ", " + what).c_str());
        const auto want = expected_slot_expert(c, ops);
        const auto got = slot_expert.download();
        for (int i = 0; i < c.num_ranks; ++i) {
          EXPECT_EQ(std::vector<int32_t>(got.begin() + i * want.size(),
                                         got.begin() + (i + 1) * want.size()),
                    want)
              << "slot_expert of rank " << i;
        }
        for (int r = 0; r < c.num_ranks; ++r) {
          for (uint64_t v : read_flags(*rt, r, runtime::make_region_layout(c).ready_flags)) {
            EXPECT_EQ(v, 2 * generation + 1) << "READY flag on rank " << r;
          }
        }
        rt->release_bank(generation, stream_);
      }
    }
  }
}

// SAMI: member i (alone) writes exactly slices j = i (mod g) to every member; owner-direct: only
// the owner writes. One op has its owner inside the group, one outside.
TEST_P(LogicalRanks, SamiSliceOwnershipAndOwnerOutsideGroup) {
  const int p = GetParam();
  const RuntimeConfig c = logical_config(p);
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  // op 0: expert of rank 1 over all ranks (owner inside); op 1: expert of rank 0 over the upper
  // half (owner outside).
  const std::vector<CopyOp> ops = {{4 * 1 + 2, 1, 0, p, 0, TransportMode::kSami},
                                   {3, 0, p / 2, p / 2, 1, TransportMode::kSami}};
  DeviceVector<CopyOp> device_ops(ops);
  uint64_t generation = 0;
  for (int writer = 0; writer < p; ++writer) {
    poison_helpers(*rt);
    ++generation;
    ::iser::testing::replicate_ranks(*rt, writer, writer + 1, device_ops.get(), 2, 0, generation,
                                     Transport::kPlan, stream_);
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
    publish_others(*rt, writer, generation);
    for (int k = 0; k < 2; ++k) {
      const CopyOp& op = ops[k];
      const int member_idx = writer - op.group_begin;
      expect_slices_written(
          *rt, op, 0,
          [&](int64_t j) {
            return member_idx >= 0 && member_idx < op.group_size && j % op.group_size == member_idx;
          },
          "op " + std::to_string(k) + " writer " + std::to_string(writer));
    }
    rt->release_bank(generation, stream_);
  }
  // Owner-direct: a non-owner writes nothing, the owner (outside the group too) writes all.
  const std::vector<CopyOp> direct = {{3, 0, p / 2, p / 2, 1, TransportMode::kOwnerDirect}};
  DeviceVector<CopyOp> device_direct(direct);
  for (int writer : {p / 2, 0}) {
    poison_helpers(*rt);
    ++generation;
    ::iser::testing::replicate_ranks(*rt, writer, writer + 1, device_direct.get(), 1, 0, generation,
                                     Transport::kPlan, stream_);
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
    publish_others(*rt, writer, generation);
    if (writer == 0) {
      expect_bank(*rt, direct, 0, 0, "owner-direct, owner outside its group");
    } else {
      expect_bank(*rt, {}, 0, 0, "owner-direct, a member alone writes nothing");
    }
    rt->release_bank(generation, stream_);
  }
  rt->check_status();
}

TEST_P(LogicalRanks, CountExchange) {
  const RuntimeConfig c = logical_config(GetParam());
  auto rt = Runtime::logical(c);
  const size_t row = c.num_experts;
  DeviceVector<int32_t> rows(c.num_ranks * row);
  DeviceVector<int32_t> matrix(static_cast<size_t>(c.num_ranks) * c.num_ranks * row);
  std::mt19937 rng(99);
  for (uint64_t epoch = 1; epoch <= 20; ++epoch) {
    std::vector<int32_t> host(c.num_ranks * row);
    for (auto& v : host) v = static_cast<int32_t>(rng() % 100000);
    rows.upload(host);
    rt->exchange_counts(rows.get(), matrix.get(), epoch, stream_);
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
    const auto got = matrix.download();
    for (int i = 0; i < c.num_ranks; ++i) {
      ASSERT_TRUE(std::equal(host.begin(), host.end(), got.begin() + i * host.size()))
          << "rank " << i << " epoch " << epoch;
    }
  }
  rt->check_status();
}

// READY is published even with nothing to copy; the gate passes at once.
TEST_P(LogicalRanks, NothingToCopyStillPublishesReady) {
  const RuntimeConfig c = logical_config(GetParam());
  auto rt = Runtime::logical(c);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_slots);
  for (uint64_t generation = 1; generation <= 3; ++generation) {
    rt->replicate(nullptr, 0, 0, generation, Transport::kPlan, stream_);
    rt->ready_gate(nullptr, 0, generation, slot_expert.get(), stream_);
    rt->release_bank(generation, stream_);
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
    for (int r = 0; r < c.num_ranks; ++r) {
      for (uint64_t v : read_flags(*rt, r, runtime::make_region_layout(c).ready_flags)) {
        EXPECT_EQ(v, 2 * generation + 1);
      }
    }
    for (int32_t v : slot_expert.download()) EXPECT_EQ(v, -1);
  }
  rt->check_status();
}

INSTANTIATE_TEST_SUITE_P(P, LogicalRanks, ::testing::Values(4, 8, 16));

// >= 1,000 invocations with two banks under `transport`: READY flags exactly 2g+1 after each gate
// (monotone), replicas exact every generation, count exchange exact every epoch.
void expect_thousand_generations(Transport transport, double host_share) {
  const int generations = std::getenv("ISER_TEST_SHORT") ? 60 : 1000;
  RuntimeConfig c = logical_config(4, 2);
  c.bundle = {16384, 512};
  c.host_share = host_share;
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  poison_helpers(*rt);
  cudaStream_t stream = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const runtime::RegionLayout layout = runtime::make_region_layout(c);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_slots);
  DeviceVector<int32_t> rows(c.num_ranks * c.num_experts);
  DeviceVector<int32_t> matrix(c.num_ranks * c.num_ranks * c.num_experts);
  DeviceVector<CopyOp> device_ops(64);
  std::mt19937 rng(7);
  std::vector<uint64_t> last(c.num_ranks * c.num_ranks, 0);
  for (uint64_t g = 1; g <= static_cast<uint64_t>(generations); ++g) {
    std::vector<int32_t> host_rows(c.num_ranks * c.num_experts);
    for (auto& v : host_rows) v = static_cast<int32_t>(rng() % 4096);
    rows.upload(host_rows);
    rt->exchange_counts(rows.get(), matrix.get(), g, stream);
    const std::vector<CopyOp> ops = random_ops(c, rng, 6);
    device_ops.upload(ops);
    const int bank = rt->bank_of(g);
    rt->replicate(device_ops.get(), static_cast<int>(ops.size()), 0, g, transport, stream);
    rt->ready_gate(device_ops.get(), static_cast<int>(ops.size()), g, slot_expert.get(), stream,
                   transport);
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
    for (int r = 0; r < c.num_ranks; ++r) {
      const auto flags = read_flags(*rt, r, layout.ready_flags);
      for (int w = 0; w < c.num_ranks; ++w) {
        ASSERT_EQ(flags[w], 2 * g + 1) << "rank " << r << " writer " << w << " generation " << g;
        ASSERT_GT(flags[w], last[r * c.num_ranks + w]);
        last[r * c.num_ranks + w] = flags[w];
      }
    }
    const auto got_matrix = matrix.download();
    for (int i = 0; i < c.num_ranks; ++i) {
      ASSERT_TRUE(
          std::equal(host_rows.begin(), host_rows.end(), got_matrix.begin() + i * host_rows.size()))
          << "count matrix of rank " << i << " epoch " << g;
    }
    // Check the replicas of this generation in its bank (untargeted slots hold older data, so
    // only the targeted ones are compared).
    for (const CopyOp& op : ops) {
      const auto src = bundle_pattern(c, op.owner, 0, op.expert % 4);
      for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
        const auto got = read_device(rt->helper_slot(m, bank, op.helper), src.size());
        ASSERT_EQ(got, src) << "generation " << g << " rank " << m << " helper " << op.helper;
      }
    }
    const auto want = expected_slot_expert(c, ops);
    const auto got = slot_expert.download();
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << "generation " << g;
    rt->release_bank(g, stream);
  }
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  rt->check_status();
  cudaStreamDestroy(stream);
}

TEST(LogicalRuntime, ThousandGenerationsMonotone) {
  ISER_REQUIRE_GPUS(1);
  expect_thousand_generations(Transport::kPlan, 0.0);
}

// p2p-sami-host: 2 of every bundle's 3 slices (the partial last one included) on the host lane;
// the staging areas are reused every other generation (two banks) under the reuse fence.
TEST(LogicalRuntime, ThousandGenerationsMonotoneHostLane) {
  ISER_REQUIRE_GPUS(1);
  expect_thousand_generations(Transport::kP2PSamiHost, 0.5);
}

// Expects slot_expert (every local rank's gate output) to mark every replica of `ops` valid, and
// every READY flag to be exactly 2g+1.
void expect_gate_and_ready(const Runtime& rt, const std::vector<CopyOp>& ops,
                           const DeviceVector<int32_t>& slot_expert, uint64_t g,
                           const std::string& what) {
  const RuntimeConfig& c = rt.config();
  const auto want = expected_slot_expert(c, ops);
  const auto got = slot_expert.download();
  for (int i = 0; i < c.num_ranks; ++i) {
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + i * want.size()))
        << what << ": slot_expert of rank " << i;
  }
  for (int r = 0; r < c.num_ranks; ++r) {
    for (uint64_t v : read_flags(rt, r, runtime::make_region_layout(c).ready_flags)) {
      EXPECT_EQ(v, 2 * g + 1) << what << ": READY flag on rank " << r;
    }
  }
}

// Every copy shape on 1, 3 and 16 SMs, transports `transport` and plan (the ops' own modes), one
// generation each from g + 1 on (g is advanced): every member's helper slot byte-identical to the
// owner's bundle (poisoned first), the gate marks every replica valid, READY exactly 2g+1.
void expect_replicas_every_shape(Runtime& rt, const std::vector<CopyOp>& ops,
                                 const CopyOp* device_ops, const DeviceVector<int32_t>& slot_expert,
                                 Transport transport, uint64_t& g) {
  const int num_ops = static_cast<int>(ops.size());
  for (const TestCopyShape& shape : kTestCopyShapes) {
    rt.set_copy_shape(shape.path, shape.warps, shape.stages);
    for (int sms : {1, 3, 16}) {
      for (Transport t : {transport, Transport::kPlan}) {
        ++g;
        const std::string what =
            std::string(to_string(t)) + ", " + shape.name() + ", " + std::to_string(sms) + " SMs";
        poison_helpers(rt);
        rt.replicate(device_ops, num_ops, 0, g, t, nullptr, sms);
        rt.ready_gate(device_ops, num_ops, g, slot_expert.get(), nullptr, t);
        ISER_EXPECT_CUDA(cudaDeviceSynchronize());
        expect_bank(rt, ops, 0, rt.bank_of(g), what.c_str());
        expect_gate_and_ready(rt, ops, slot_expert, g, what);
        if (::testing::Test::HasFailure()) return;
        rt.release_bank(g, nullptr);
      }
    }
  }
}

// SAMI with the owner inside its group (docs/design.md §4.5: the owner also fills its own helper
// slot), P = 4: groups of 4 with the owner at position 2 and at position 0, groups of 2 with the
// owner at position 1 ({2, 3}) and 0 ({0, 1}). A 1 MiB bundle (129 slices, the last one partial:
// each member of a group of 4 runs a pipeline of 32-33 slices). Every copy shape, 1 to 16 SMs, both
// transports that run SAMI ops: every member's helper slot is byte-identical to the owner's
// bundle (poisoned first), the gate marks every replica valid, READY is exactly 2g+1 everywhere,
// homes are untouched.
TEST(LogicalRuntime, SamiOwnerInsideGroupFillsEveryMember) {
  ISER_REQUIRE_GPUS(1);
  RuntimeConfig c = logical_config(4);
  c.bundle = {(1 << 20) + 16, 4096 + 48};
  auto rt = Runtime::logical(c);
  ASSERT_EQ(c.bundle.num_slices(), 129);
  fill_homes(*rt);
  const std::vector<CopyOp> ops = {{4 * 2 + 1, 2, 0, 4, 0, TransportMode::kSami},
                                   {3, 0, 0, 4, 1, TransportMode::kSami},
                                   {4 * 3 + 2, 3, 2, 2, 2, TransportMode::kSami},
                                   {0, 0, 0, 2, 2, TransportMode::kSami}};
  validate_copy_list(c, ops);
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_slots);
  uint64_t g = 0;
  expect_replicas_every_shape(*rt, ops, device_ops.get(), slot_expert, Transport::kP2PSami, g);
  expect_homes_intact(*rt);
  rt->check_status();
}

// Owner-assisted SAMI (p2p-sami-owner), P = 4: owners outside groups of 2 and 1, and one owner
// inside a group of 4 (plain SAMI). A bundle of 129 slices, the last one partial (the owner of
// the op over {2, 3} moves it: slice 128 = 2 (mod 3)).
const std::vector<CopyOp>& owner_assisted_ops() {
  static const std::vector<CopyOp> ops = {{3, 0, 2, 2, 0, TransportMode::kSamiOwner},
                                          {4 * 2 + 1, 2, 1, 1, 0, TransportMode::kSamiOwner},
                                          {4 * 1 + 2, 1, 0, 4, 1, TransportMode::kSamiOwner},
                                          {4 * 3, 3, 0, 1, 2, TransportMode::kSamiOwner}};
  return ops;
}

RuntimeConfig owner_assisted_config() {
  RuntimeConfig c = logical_config(4, 2);
  c.bundle = {(1 << 20) + 16, 4096 + 48};
  return c;
}

// One writer at a time: the owner outside its group stores exactly its slices j = g (mod g + 1)
// and member i its slices j = i (mod g + 1) to every member, each slice once; an owner inside its
// group writes as a plain SAMI member (j = i (mod g)).
TEST(LogicalRuntime, SamiOwnerAssistedSliceOwnership) {
  ISER_REQUIRE_GPUS(1);
  const RuntimeConfig c = owner_assisted_config();
  auto rt = Runtime::logical(c);
  ASSERT_EQ(c.bundle.num_slices(), 129);
  fill_homes(*rt);
  const std::vector<CopyOp>& ops = owner_assisted_ops();
  const int num_ops = static_cast<int>(ops.size());
  validate_copy_list(c, ops);
  DeviceVector<CopyOp> device_ops(ops);
  uint64_t generation = 0;
  for (Transport t : {Transport::kP2PSamiOwner, Transport::kPlan}) {
    for (int writer = 0; writer < c.num_ranks; ++writer) {
      poison_helpers(*rt);
      ++generation;
      const int bank = rt->bank_of(generation);
      ::iser::testing::replicate_ranks(*rt, writer, writer + 1, device_ops.get(), num_ops, 0,
                                       generation, t, nullptr, 3);
      ISER_EXPECT_CUDA(cudaDeviceSynchronize());
      publish_others(*rt, writer, generation);
      for (int k = 0; k < num_ops; ++k) {
        const CopyOp& op = ops[k];
        const bool inside = op.owner >= op.group_begin && op.owner < op.group_begin + op.group_size;
        const int num_writers = op.group_size + (inside ? 0 : 1);
        const bool is_member = writer >= op.group_begin && writer < op.group_begin + op.group_size;
        const int writer_idx = is_member            ? writer - op.group_begin
                               : writer == op.owner ? op.group_size
                                                    : -1;
        expect_slices_written(
            *rt, op, bank,
            [&](int64_t j) { return writer_idx >= 0 && j % num_writers == writer_idx; },
            std::string(to_string(t)) + ": op " + std::to_string(k) + " writer " +
                std::to_string(writer));
        if (HasFailure()) return;
      }
      rt->release_bank(generation, nullptr);
    }
  }
  rt->check_status();
}

// Every copy shape, 1 to 16 SMs, transports p2p-sami-owner and plan (ops of mode 2): every
// member's helper slot byte-identical to the owner's bundle (poisoned first), the gate marks every
// replica valid, READY exactly 2g+1 everywhere; then 6 invocations in one CUDA graph (device
// generations, both banks); homes untouched.
TEST(LogicalRuntime, SamiOwnerAssistedFillsEveryMember) {
  ISER_REQUIRE_GPUS(1);
  const RuntimeConfig c = owner_assisted_config();
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  const std::vector<CopyOp>& ops = owner_assisted_ops();
  const int num_ops = static_cast<int>(ops.size());
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_slots);
  uint64_t g = 0;
  expect_replicas_every_shape(*rt, ops, device_ops.get(), slot_expert, Transport::kP2PSamiOwner, g);
  if (HasFailure()) return;
  rt->set_copy_shape(CopyPath::kBulk);
  poison_helpers(*rt);
  cudaStream_t stream = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch_as_graph(stream, 6, [&] {
    rt->replicate(device_ops.get(), num_ops, 0, kDeviceGeneration, Transport::kP2PSamiOwner, stream,
                  8);
    rt->ready_gate(device_ops.get(), num_ops, kDeviceGeneration, slot_expert.get(), stream,
                   Transport::kP2PSamiOwner);
    rt->release_bank(kDeviceGeneration, stream);
  });
  cudaStreamDestroy(stream);
  for (int r = 0; r < c.num_ranks; ++r) ASSERT_EQ(rt->last_generation(r), g + 6) << "rank " << r;
  expect_gate_and_ready(*rt, ops, slot_expert, g + 6, "CUDA graph of 6 invocations");
  for (int bank = 0; bank < c.num_banks; ++bank) {
    expect_bank(*rt, ops, 0, bank, "p2p-sami-owner, CUDA graph of 6 invocations");
  }
  expect_homes_intact(*rt);
  rt->check_status();
}

// p2p-sami-host, P = 2, 4, 8 logical ranks: random copy lists (owners inside and outside groups
// of 1..P), a bundle of 129 slices (the last one partial), host shares that put 6 (2 chunks, the
// last one partial), 32 (8 chunks) and all 129 slices on the host lane, 1 and 4 host-lane CTAs,
// every copy shape on 1 and 3 copy SMs: every member's helper slot is byte-identical to the
// owner's bundle (poisoned first), untargeted slots stay poisoned, the gate marks every replica
// valid and READY is exactly 2g+1; host share 0 is p2p-sami-owner; homes untouched.
class HostLaneRanks : public LogicalRanks {};

TEST_P(HostLaneRanks, ReplicasMatchOwners) {
  RuntimeConfig c = logical_config(GetParam(), 2);
  c.bundle = {(1 << 20) + 16, 4096 + 48};
  c.host_share = 1.0;
  auto rt = Runtime::logical(c);
  ASSERT_EQ(c.bundle.num_slices(), 129);
  fill_homes(*rt);
  std::mt19937 rng(99 + GetParam());
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_ranks * c.num_slots);
  DeviceVector<CopyOp> device_ops(64);
  uint64_t g = 0;
  // ISER_TEST_SHORT (sanitizer runs): 3 copy SMs only.
  const std::vector<int> copy_sms =
      std::getenv("ISER_TEST_SHORT") ? std::vector<int>{3} : std::vector<int>{1, 3};
  // The bulk host lane runs on each bulk shape's stages (1 x 1: no lag; 2 x 11: deep pipelines,
  // many chunks per warp); the register host lane on the default bulk shape and the register
  // path.
  for (const TestCopyShape& shape : kTestCopyShapes) {
    rt->set_copy_shape(shape.path, shape.warps, shape.stages);
    std::vector<CopyPath> host_paths = {CopyPath::kBulk};
    if (shape.path == CopyPath::kBulk && shape.warps == 0)
      host_paths.push_back(CopyPath::kRegisters);
    for (CopyPath host_path : host_paths) {
      rt->set_host_path(host_path);
      for (double share : {0.05, 0.25, 1.0, 0.0}) {
        for (int host_sms : {1, 4}) {
          for (int sms : copy_sms) {
            ++g;
            rt->set_host_share(share, host_sms);
            const std::vector<CopyOp> ops = random_ops(c, rng, 3 * c.num_slots);
            device_ops.upload(ops);
            const int num_ops = static_cast<int>(ops.size());
            const std::string what =
                "p2p-sami-host, " + shape.name() + ", host lane " +
                std::string(to_string(host_path)) + ", share " + std::to_string(share) + " (" +
                std::to_string(rt->host_slices()) + " slices), " + std::to_string(host_sms) +
                " host + " + std::to_string(sms) + " copy SMs";
            poison_helpers(*rt);
            rt->replicate(device_ops.get(), num_ops, 0, g, Transport::kP2PSamiHost, stream_, sms);
            rt->ready_gate(device_ops.get(), num_ops, g, slot_expert.get(), stream_,
                           Transport::kP2PSamiHost);
            ISER_EXPECT_CUDA(cudaStreamSynchronize(stream_));
            expect_bank(*rt, ops, 0, rt->bank_of(g), what.c_str());
            expect_gate_and_ready(*rt, ops, slot_expert, g, what);
            if (HasFailure()) return;
            rt->release_bank(g, stream_);
          }
        }
      }
    }
  }
  EXPECT_EQ(rt->host_slices(), 0);
  expect_homes_intact(*rt);
  rt->check_status();
}

INSTANTIATE_TEST_SUITE_P(P, HostLaneRanks, ::testing::Values(2, 4, 8));

TEST(LogicalRuntime, CopyEngineThroughReplicateIsRefused) {
  ISER_REQUIRE_GPUS(1);
  auto rt = Runtime::logical(logical_config(4));
  try {
    rt->replicate(nullptr, 0, 0, 1, Transport::kCopyEngine, nullptr);
    FAIL() << "copy-engine through replicate() was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host copy list"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace iser::testing
