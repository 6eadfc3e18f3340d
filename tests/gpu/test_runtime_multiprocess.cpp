// Runtime with real P2P: one process per GPU. Each test re-executes this binary once per rank
// (same --gtest_filter, rank in ISER_MP_RANK) with a file-based NCCL unique id in a private
// directory; the parent waits for every rank and fails on any non-zero exit or a timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include <nccl.h>

#include "multiprocess_util.h"
#include "runtime_test_util.h"

namespace iser::testing {
namespace {

RuntimeConfig two_rank_config() {
  RuntimeConfig c;
  c.num_ranks = 2;
  c.num_experts = 8;
  c.num_slots = 3;
  c.bundle = {(1 << 20) + 3 * 4096, 8192};  // 1 MiB + 12 KiB weights, 8 KiB scales
  c.num_banks = 2;
  c.copy_sms = 8;
  c.timeout_us = 5'000'000;
  return c;
}

void barrier(const Communicator& comm) {
  DeviceVector<float> x(1);
  ASSERT_EQ(ncclAllReduce(x.get(), x.get(), 1, ncclFloat, ncclSum, comm.get(), nullptr),
            ncclSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Every transport over NVLink (p2p-sami-host with a quarter of each bundle through host memory),
// owner inside and outside the group, 1,000 generations: READY exactly 2g+1 from both writers
// after every gate, counts exact every epoch, replicas byte-exact (poisoned first) every 25th
// generation.
TEST(MultiProcess, ReplicasCountsAndReadyOverThousandGenerations) {
  ISER_AS_RANKS(2, 240);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  RuntimeConfig c = two_rank_config();
  c.host_share = 0.25;
  Runtime rt(c, comm);
  EXPECT_FALSE(std::filesystem::exists(env->id_file)) << "unique id file left behind";
  fill_homes(rt);
  poison_helpers(rt);
  const std::vector<CopyOp> ops = {{1, 0, 0, 2, 0, TransportMode::kOwnerDirect},
                                   {6, 1, 0, 2, 1, TransportMode::kSami},
                                   {2, 0, 1, 1, 2, TransportMode::kSami}};  // owner 0 outside {1}
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_slots);
  DeviceVector<int32_t> row(c.num_experts);
  DeviceVector<int32_t> matrix(static_cast<size_t>(c.num_ranks) * c.num_experts);
  cudaStream_t stream = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const runtime::RegionLayout layout = runtime::make_region_layout(c);
  const Transport transports[] = {Transport::kPlan, Transport::kP2PDirect, Transport::kP2PSami,
                                  Transport::kCopyEngine, Transport::kP2PSamiHost};
  auto row_of = [&](int rank, uint64_t epoch) {
    std::vector<int32_t> r(c.num_experts);
    for (int e = 0; e < c.num_experts; ++e) {
      r[e] = static_cast<int32_t>(
          (epoch * 7919 + static_cast<uint64_t>(rank) * 104729 + static_cast<uint64_t>(e) * 31) %
          65536);
    }
    return r;
  };
  uint64_t last_ready = 0;
  for (uint64_t g = 1; g <= 1000; ++g) {
    const Transport t = transports[g % 5];
    const bool check_bytes = g % 25 == 0 || g <= 8;
    const int bank = rt.bank_of(g);
    if (check_bytes) {
      // NOTE: the peer may start writing generation g into this bank as soon as we released
      // g - 2; the barrier keeps it behind the poison.
      poison_helpers(rt);
      barrier(comm);
    }
    row.upload(row_of(env->rank, g));
    rt.exchange_counts(row.get(), matrix.get(), g, stream);
    if (t == Transport::kCopyEngine) {
      rt.replicate_copy_engine(ops, 0, g, stream);
    } else {
      rt.replicate(device_ops.get(), 3, 0, g, t, stream);
    }
    rt.ready_gate(device_ops.get(), 3, g, slot_expert.get(), stream, t);
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
    const auto flags = read_flags(rt, env->rank, layout.ready_flags);
    ASSERT_EQ(flags[0], 2 * g + 1) << "generation " << g << " transport " << to_string(t);
    ASSERT_EQ(flags[1], 2 * g + 1) << "generation " << g << " transport " << to_string(t);
    ASSERT_GT(flags[0], last_ready);
    last_ready = flags[0];
    const auto m = matrix.download();
    ASSERT_EQ(std::vector<int32_t>(m.begin(), m.begin() + c.num_experts), row_of(0, g));
    ASSERT_EQ(std::vector<int32_t>(m.begin() + c.num_experts, m.end()), row_of(1, g));
    const auto want = expected_slot_expert(c, ops);
    ASSERT_EQ(slot_expert.download(), want) << "generation " << g;
    if (check_bytes) {
      expect_bank(rt, ops, 0, bank, std::string(to_string(t)).c_str());
      if (HasFailure()) return;
    }
    rt.release_bank(g, stream);
  }
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  rt.check_status();
  barrier(comm);
  cudaStreamDestroy(stream);
}

// Two ranks, a bundle of 387 slices (the last one partial), 4 helper slots. Replicates `ops` under
// `transport` and `plan` (which keeps the ops' own modes) for every copy shape on 1, 8 and 16 SMs,
// then under `transport` as the benchmark runs it: one CUDA graph of 10 invocations with device
// generations (default shape, 8 SMs). After every generation (after the graph: in both banks) every
// member's helper slot is byte-identical to the owner's bundle (poisoned first), untargeted slots
// stay poisoned, READY is exactly 2g+1 from both writers and the gate marks every replica valid;
// the homes stay untouched.
void expect_replicas_every_shape_then_graph(const RankEnv& env, const std::vector<CopyOp>& ops,
                                            Transport transport, double host_share = 0.0) {
  Communicator comm = Communicator::from_unique_id_file(env.id_file, env.rank, env.world);
  RuntimeConfig c = two_rank_config();
  c.host_share = host_share;
  c.num_slots = 4;
  c.bundle = {(3 << 20) + 3 * 4096 + 16, 4096 + 48};  // 3,162,416 bytes: 386 slices + 304 bytes
  Runtime rt(c, comm);
  ASSERT_EQ(c.bundle.num_slices(), 387);
  validate_copy_list(c, ops);
  fill_homes(rt);
  const int rank = env.rank;
  const int num_ops = static_cast<int>(ops.size());
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_slots);
  cudaStream_t stream = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const runtime::RegionLayout layout = runtime::make_region_layout(c);
  uint64_t g = 0;
  for (const TestCopyShape& shape : kTestCopyShapes) {
    rt.set_copy_shape(shape.path, shape.warps, shape.stages);
    for (int sms : {1, 8, 16}) {
      for (Transport t : {transport, Transport::kPlan}) {
        ++g;
        const std::string what = std::string(to_string(t)) + ", " + shape.name() + ", " +
                                 std::to_string(sms) + " SMs, generation " + std::to_string(g);
        poison_helpers(rt);
        barrier(comm);  // the peer writes into this rank's slots only after the poison
        rt.replicate(device_ops.get(), num_ops, 0, g, t, stream, sms);
        rt.ready_gate(device_ops.get(), num_ops, g, slot_expert.get(), stream, t);
        ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
        const auto flags = read_flags(rt, rank, layout.ready_flags);
        ASSERT_EQ(flags[0], 2 * g + 1) << what;
        ASSERT_EQ(flags[1], 2 * g + 1) << what;
        ASSERT_EQ(slot_expert.download(), expected_slot_expert(c, ops)) << what;
        expect_bank(rt, ops, 0, rt.bank_of(g), what.c_str());
        if (::testing::Test::HasFailure()) return;
        rt.release_bank(g, stream);
      }
    }
  }
  rt.set_copy_shape(CopyPath::kBulk);
  const std::string graph_what =
      std::string(to_string(transport)) + ", CUDA graph of 10 invocations";
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  poison_helpers(rt);
  barrier(comm);
  launch_as_graph(stream, 10, [&] {
    rt.replicate(device_ops.get(), num_ops, 0, kDeviceGeneration, transport, stream, 8);
    rt.ready_gate(device_ops.get(), num_ops, kDeviceGeneration, slot_expert.get(), stream,
                  transport);
    rt.release_bank(kDeviceGeneration, stream);
  });
  ASSERT_EQ(rt.last_generation(0), g + 10);
  const auto flags = read_flags(rt, rank, layout.ready_flags);
  EXPECT_EQ(flags[0], 2 * (g + 10) + 1);
  EXPECT_EQ(flags[1], 2 * (g + 10) + 1);
  EXPECT_EQ(slot_expert.download(), expected_slot_expert(c, ops));
  for (int bank = 0; bank < c.num_banks; ++bank) {  // 10 generations wrote both banks
    expect_bank(rt, ops, 0, bank, graph_what.c_str());
  }
  expect_homes_intact(rt);
  rt.check_status();
  barrier(comm);
  cudaStreamDestroy(stream);
}

// SAMI with the owner inside a group of two (docs/design.md §4.5: the owner also uses its helper
// slot): each rank moves every other slice of the owner's bundle (the owner from its home slot, the
// other rank over NVLink) and stores it to both helper slots. Both ranks as owners, a bundle of
// 387 slices (the last one partial, odd count: member 0 moves one more), transports p2p-sami and
// plan (SAMI ops), checked as expect_replicas_every_shape_then_graph says.
TEST(MultiProcess, SamiOwnerInsideGroupFillsBothHelperSlots) {
  ISER_AS_RANKS(2, 120);
  // Owner 0 (experts 0, 3) and owner 1 (expert 6), all over {0, 1}; helper 3 stays untargeted.
  const std::vector<CopyOp> ops = {{0, 0, 0, 2, 0, TransportMode::kSami},
                                   {6, 1, 0, 2, 1, TransportMode::kSami},
                                   {3, 0, 0, 2, 2, TransportMode::kSami}};
  expect_replicas_every_shape_then_graph(*env, ops, Transport::kP2PSami);
}

// Owner-assisted SAMI over NVLink, g = 1: owner 0 outside group {1} and owner 1 outside group
// {0}, so both GPUs move each bundle (the owner pushes the odd slices from its home slot, the
// member pulls the even ones) and each GPU is the owner of one op and the member of another. A
// bundle of 387 slices (the last one partial, moved by the member), transports p2p-sami-owner and
// plan (ops of mode 2), checked as expect_replicas_every_shape_then_graph says.
// Helper 0: expert 0 (owner 0) on {1} and expert 5 (owner 1) on {0}; helper 1: expert 3 (owner
// 0) on {1}; helper 2 on {1} and helper 3 everywhere stay untargeted (rank 0's helper 1 too).
std::vector<CopyOp> owner_assisted_ops() {
  return {{0, 0, 1, 1, 0, TransportMode::kSamiOwner},
          {5, 1, 0, 1, 0, TransportMode::kSamiOwner},
          {3, 0, 1, 1, 1, TransportMode::kSamiOwner}};
}

TEST(MultiProcess, SamiOwnerAssistedFillsMembersFromBothGpus) {
  ISER_AS_RANKS(2, 120);
  expect_replicas_every_shape_then_graph(*env, owner_assisted_ops(), Transport::kP2PSamiOwner);
}

// p2p-sami-host, the same ops as above with a quarter of every bundle (97 of 387 slices, 25
// chunks, the partial last slice included) staged in shared pinned host memory by the owner's GPU
// and fetched over PCIe by the other GPU while the head moves over NVLink, both directions at once.
TEST(MultiProcess, SamiHostFillsMembersOverNvlinkAndPcie) {
  ISER_AS_RANKS(2, 120);
  expect_replicas_every_shape_then_graph(*env, owner_assisted_ops(), Transport::kP2PSamiHost, 0.25);
}

// A stalled host lane: owner 0's replicate of generation 1 waits behind a kernel for 1.5 s, so
// member 1's host lane times out (300 ms): it reports kHostLaneTimeout (owner 0, generation 1),
// publishes READY failed and its gate sends the op's routes home; nobody hangs. Once the owner
// ran late, generation 2 (the other bank) replicates byte-exactly on both GPUs.
TEST(MultiProcess, StalledHostLaneFallsBackWithoutHang) {
  ISER_AS_RANKS(2, 120);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  RuntimeConfig c = two_rank_config();
  c.host_share = 0.25;
  c.timeout_us = 300'000;
  Runtime rt(c, comm);
  fill_homes(rt);
  poison_helpers(rt);
  const std::vector<CopyOp> ops = {{0, 0, 1, 1, 0, TransportMode::kSamiOwner}};
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_ranks) * c.num_slots);
  Stall stall;  // never released: the stall ends by its own timeout
  cudaStream_t stream = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  barrier(comm);
  if (env->rank == 0) {
    stall.hold(stream, 1'500'000'000ull);
  }
  rt.replicate(device_ops.get(), 1, 0, 1, Transport::kP2PSamiHost, stream);
  rt.ready_gate(device_ops.get(), 1, 1, slot_expert.get(), stream, Transport::kP2PSamiHost);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  std::vector<int32_t> none(static_cast<size_t>(c.num_ranks) * c.num_slots, -1);
  EXPECT_EQ(slot_expert.download(), none) << "rank " << env->rank << " kept a failed replica";
  const RuntimeStatus s = rt.status(0);
  if (env->rank == 1) {
    EXPECT_EQ(s.code, StatusCode::kHostLaneTimeout) << s.message();
    EXPECT_EQ(s.peer, 0);
    EXPECT_EQ(s.tag, 1u);
  } else {
    EXPECT_EQ(s.code, StatusCode::kCopyFailed) << s.message();
    EXPECT_EQ(s.peer, 1);
  }
  rt.clear_status();
  rt.release_bank(1, stream);
  barrier(comm);
  poison_helpers(rt);
  barrier(comm);
  rt.replicate(device_ops.get(), 1, 0, 2, Transport::kP2PSamiHost, stream);
  rt.ready_gate(device_ops.get(), 1, 2, slot_expert.get(), stream, Transport::kP2PSamiHost);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  rt.check_status();
  EXPECT_EQ(slot_expert.download(), expected_slot_expert(c, ops));
  expect_bank(rt, ops, 0, rt.bank_of(2), "generation after the stalled host lane");
  barrier(comm);
  cudaStreamDestroy(stream);
}

TEST(MultiProcess, MismatchedConfigurationIsRefusedBeforeMapping) {
  ISER_AS_RANKS(2, 120);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  RuntimeConfig c = two_rank_config();
  if (env->rank == 1) c.num_experts = 16;
  try {
    Runtime rt(c, comm);
    ADD_FAILURE() << "rank " << env->rank << " accepted a mismatched configuration";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 presents num_experts (E) = 16 but rank 0 "
                                         "presents 8"),
              std::string::npos)
        << e.what();
  }
  // An invalid configuration on one rank fails every rank (no hang).
  RuntimeConfig bad = two_rank_config();
  if (env->rank == 0) bad.num_banks = 3;
  try {
    Runtime rt(bad, comm);
    ADD_FAILURE() << "rank " << env->rank << " accepted an invalid peer";
  } catch (const Error& e) {
    const std::string want = env->rank == 0 ? "num_banks = 3" : "rank 0 rejected its own";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  barrier(comm);
}

TEST(MultiProcess, CountTimeoutNamesTheMissingRank) {
  ISER_AS_RANKS(2, 120);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  RuntimeConfig c = two_rank_config();
  c.timeout_us = 300'000;
  Runtime rt(c, comm);
  if (env->rank == 0) {
    DeviceVector<int32_t> row(c.num_experts);
    DeviceVector<int32_t> matrix(static_cast<size_t>(c.num_ranks) * c.num_experts);
    rt.exchange_counts(row.get(), matrix.get(), 1, nullptr);
    const RuntimeStatus s = rt.status(0);
    EXPECT_EQ(s.code, StatusCode::kCountTimeout);
    EXPECT_EQ(s.peer, 1);
    EXPECT_EQ(s.tag, 1u);
    try {
      rt.check_status();
      ADD_FAILURE() << "no error for the missing rank";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 never published epoch 1"), std::string::npos)
          << e.what();
    }
  }
  barrier(comm);
}

}  // namespace
}  // namespace iser::testing
