// Peer memory through NCCL symmetric windows (src/runtime/peer_memory*.cpp). One GPU: a 1-rank
// communicator registers its region as a window and runs the runtime through NCCL's LSA pointer
// of itself (counts, 1,000 generations of replicas, a stalled copy falling back home), the IPC
// fallback chosen by ISER_PEER_MEMORY, and the refusals. Two GPUs (skipped below): both ranks
// choose the window, and ranks asking for different peer memory fail alike instead of hanging.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nccl.h>

#include "multiprocess_util.h"
#include "runtime_test_util.h"

namespace iser::testing {
namespace {

RuntimeConfig one_rank_config() {
  RuntimeConfig c;
  c.num_ranks = 1;
  c.num_experts = 4;
  c.num_slots = 3;
  c.bundle = {(1 << 20) + 3 * 4096 + 16, 4096 + 48};  // a partial last slice
  c.num_banks = 2;
  c.copy_sms = 8;
  c.timeout_us = 5'000'000;
  return c;
}

// Sets (value != nullptr) or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

Communicator one_rank_communicator() {
  const ScopedEnv id("ISER_TEST_NCCL_ID", Communicator::new_unique_id_hex().c_str());
  return Communicator::from_env(0, 1, "ISER_TEST_NCCL_ID");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The NCCL path's tests need NCCL to grant a symmetric window to a 1-rank communicator; where it
// does not (auto fell back to IPC), they skip with auto's reason.
#define ISER_REQUIRE_NCCL_WINDOW(rt)                                                  \
  do {                                                                                \
    if ((rt).peer_memory() != PeerMemoryMode::kNccl) GTEST_SKIP() << (rt).describe(); \
  } while (0)

// The set-up every NCCL-path test checks: the mode, the report line, and the region reached
// through NCCL's LSA pointer is the region this process allocated (written through one, read
// through the other).
void expect_nccl_window(const Runtime& rt) {
  EXPECT_EQ(rt.peer_memory(), PeerMemoryMode::kNccl) << rt.describe();
  EXPECT_TRUE(contains(rt.describe(), "peer memory: nccl (NCCL symmetric window")) << rt.describe();
  EXPECT_TRUE(contains(rt.describe(), "LSA team of 1 rank")) << rt.describe();
  EXPECT_TRUE(contains(rt.describe(), "; multicast unavailable: ")) << rt.describe();
  EXPECT_FALSE(rt.multicast_available());
  const std::vector<uint8_t> pattern = bundle_pattern(rt.config(), 7, 0, 0);
  ASSERT_EQ(
      cudaMemcpy(rt.home_bundle(0, 0, 0), pattern.data(), pattern.size(), cudaMemcpyHostToDevice),
      cudaSuccess);
  const runtime::RegionLayout layout = runtime::make_region_layout(rt.config());
  const auto* lsa_home = static_cast<const char*>(rt.peer_base(0)) + layout.home_slot(0, 0);
  EXPECT_EQ(read_device(lsa_home, pattern.size()), pattern);
}

TEST(NcclPeerMemory, OneRankWindowRunsCountsAndThousandGenerations) {
  ISER_REQUIRE_GPUS(1);
  const ScopedEnv env("ISER_PEER_MEMORY", nullptr);
  Communicator comm = one_rank_communicator();
  const RuntimeConfig c = one_rank_config();
  Runtime rt(c, comm);
  ISER_REQUIRE_NCCL_WINDOW(rt);
  expect_nccl_window(rt);
  fill_homes(rt);
  // Owner 0 is the only member: each op copies a home bundle into one of its own helper slots,
  // every store through the LSA pointer; all three writer modes.
  const std::vector<CopyOp> ops = {{1, 0, 0, 1, 0, TransportMode::kOwnerDirect},
                                   {3, 0, 0, 1, 1, TransportMode::kSami},
                                   {2, 0, 0, 1, 2, TransportMode::kSamiOwner}};
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_slots));
  DeviceVector<int32_t> row(c.num_experts);
  DeviceVector<int32_t> matrix(c.num_experts);
  cudaStream_t stream = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const runtime::RegionLayout layout = runtime::make_region_layout(c);
  const Transport transports[] = {Transport::kPlan, Transport::kP2PDirect, Transport::kP2PSami,
                                  Transport::kP2PSamiOwner, Transport::kCopyEngine};
  for (uint64_t g = 1; g <= 1000; ++g) {
    const Transport t = transports[g % 5];
    const bool check_bytes = g % 25 == 0 || g <= 10;
    if (check_bytes) poison_helpers(rt);
    std::vector<int32_t> counts(c.num_experts);
    for (int e = 0; e < c.num_experts; ++e) counts[e] = static_cast<int32_t>((g * 7919 + e) % 9973);
    row.upload(counts);
    rt.exchange_counts(row.get(), matrix.get(), g, stream);
    if (t == Transport::kCopyEngine) {
      rt.replicate_copy_engine(ops, 0, g, stream);
    } else {
      rt.replicate(device_ops.get(), 3, 0, g, t, stream);
    }
    rt.ready_gate(device_ops.get(), 3, g, slot_expert.get(), stream, t);
    ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
    const std::string what = "generation " + std::to_string(g) + " " + std::string(to_string(t));
    ASSERT_EQ(matrix.download(), counts) << what;
    ASSERT_EQ(read_flags(rt, 0, layout.ready_flags)[0], 2 * g + 1) << what;
    ASSERT_EQ(slot_expert.download(), expected_slot_expert(c, ops)) << what;
    if (check_bytes) {
      expect_bank(rt, ops, 0, rt.bank_of(g), what.c_str());
      if (HasFailure()) return;
    }
    rt.release_bank(g, stream);
  }
  // Device generations (the graph path) continue on the same window.
  launch_as_graph(stream, 4, [&] {
    rt.replicate(device_ops.get(), 3, 0, kDeviceGeneration, Transport::kPlan, stream);
    rt.ready_gate(device_ops.get(), 3, kDeviceGeneration, slot_expert.get(), stream);
    rt.release_bank(kDeviceGeneration, stream);
  });
  EXPECT_EQ(rt.last_generation(0), 1004u);
  EXPECT_EQ(slot_expert.download(), expected_slot_expert(c, ops));
  expect_homes_intact(rt);
  rt.check_status();
  // No multicast transport is offered: asking for one by name fails, saying why.
  try {
    (void)transport_from_string("multicast");
    ADD_FAILURE() << "multicast transport offered";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "multicast")) << e.what();
  }
  cudaStreamDestroy(stream);
}

// The only writer (this rank) stalls behind a kernel the host releases after the gate returned:
// the gate times out, the routes to the helper slot fall back to the home slot, and once the copy
// is released the next generation replicates normally.
TEST(NcclPeerMemory, OneRankStalledCopyFallsBackHome) {
  ISER_REQUIRE_GPUS(1);
  const ScopedEnv env("ISER_PEER_MEMORY", nullptr);
  Communicator comm = one_rank_communicator();
  RuntimeConfig c = one_rank_config();
  c.timeout_us = 200'000;
  Runtime rt(c, comm);
  ISER_REQUIRE_NCCL_WINDOW(rt);
  fill_homes(rt);
  poison_helpers(rt);
  const int h = c.experts_per_rank();
  const std::vector<CopyOp> ops = {{2, 0, 0, 1, 1, TransportMode::kOwnerDirect}};
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_slots));
  // Routes: expert 2 sent to helper slot H + 1 (its replica), or to its home slot 2.
  const std::vector<int32_t> experts = {2, 2, 0, 2, 3};
  const std::vector<int32_t> routed = {h + 1, 2, 0, h + 1, 3};
  const std::vector<int32_t> want = {2, 2, 0, 2, 3};
  DeviceVector<int32_t> device_experts(experts);
  DeviceVector<int32_t> slots(routed);
  Stall stall;
  cudaStream_t main_stream = nullptr;
  cudaStream_t stalled = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stalled, cudaStreamNonBlocking));
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  stall.hold(stalled, 5'000'000'000ull);
  rt.replicate(device_ops.get(), 1, 0, 1, Transport::kP2PDirect, stalled);
  rt.ready_gate(device_ops.get(), 1, 1, slot_expert.get(), main_stream, Transport::kP2PDirect);
  rt.fallback_rewrite(slot_expert.get(), device_experts.get(), slots.get(),
                      static_cast<int64_t>(experts.size()), main_stream);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(main_stream));  // the gate returned: no hang
  std::vector<int32_t> got(experts.size());
  std::vector<int32_t> gate(static_cast<size_t>(c.num_slots));
  ISER_EXPECT_CUDA(cudaMemcpyAsync(got.data(), slots.get(), got.size() * 4, cudaMemcpyDeviceToHost,
                                   main_stream));
  ISER_EXPECT_CUDA(cudaMemcpyAsync(gate.data(), slot_expert.get(), gate.size() * 4,
                                   cudaMemcpyDeviceToHost, main_stream));
  ISER_EXPECT_CUDA(cudaStreamSynchronize(main_stream));
  EXPECT_NE(cudaStreamQuery(stalled), cudaSuccess) << "the copy finished before the gate gave up";
  stall.release();  // the late copy
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(got, want);
  EXPECT_EQ(gate, std::vector<int32_t>(c.num_slots, -1));
  const RuntimeStatus s = rt.status(0);
  EXPECT_EQ(s.code, StatusCode::kReadyTimeout) << s.message();
  EXPECT_EQ(s.tag, 1u);
  EXPECT_EQ(s.fallback_routes, 2u);
  rt.clear_status();
  rt.release_bank(1, main_stream);
  poison_helpers(rt);
  rt.replicate(device_ops.get(), 1, 0, 2, Transport::kP2PDirect, main_stream);
  rt.ready_gate(device_ops.get(), 1, 2, slot_expert.get(), main_stream, Transport::kP2PDirect);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(main_stream));
  rt.check_status();
  expect_bank(rt, ops, 0, rt.bank_of(2), "generation after the stall");
  EXPECT_EQ(slot_expert.download(), expected_slot_expert(c, ops));
  cudaStreamDestroy(main_stream);
  cudaStreamDestroy(stalled);
}

// nccl asked for: granted, or refused with the reason on this rank, and the process stays usable
// (no kernel ever read a handle that is not a window).
TEST(NcclPeerMemory, NcclAskedIsGrantedOrRefusedCleanly) {
  ISER_REQUIRE_GPUS(1);
  const ScopedEnv env("ISER_PEER_MEMORY", "nccl");
  Communicator comm = one_rank_communicator();
  try {
    Runtime rt(one_rank_config(), comm);
    expect_nccl_window(rt);
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(),
                         "peer memory 'nccl' asked for, but rank 0 cannot use an NCCL "
                         "window: "))
        << e.what();
    std::printf("[ refused  ] %s\n", e.what());
  }
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  ISER_EXPECT_CUDA(cudaGetLastError());
  const ScopedEnv ipc("ISER_PEER_MEMORY", "ipc");
  Runtime after(one_rank_config(), comm);
  EXPECT_EQ(after.peer_memory(), PeerMemoryMode::kIpc);
}

TEST(NcclPeerMemory, EnvironmentSelectsIpcFallback) {
  ISER_REQUIRE_GPUS(1);
  const ScopedEnv env("ISER_PEER_MEMORY", "ipc");
  Communicator comm = one_rank_communicator();
  const RuntimeConfig c = one_rank_config();  // kAuto: the environment decides
  Runtime rt(c, comm);
  EXPECT_EQ(rt.peer_memory(), PeerMemoryMode::kIpc);
  EXPECT_TRUE(contains(rt.describe(), "peer memory: ipc (CUDA IPC handles, as asked)"))
      << rt.describe();
  fill_homes(rt);
  poison_helpers(rt);
  const std::vector<CopyOp> ops = {{0, 0, 0, 1, 2, TransportMode::kSami}};
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(static_cast<size_t>(c.num_slots));
  rt.replicate(device_ops.get(), 1, 0, 1, Transport::kPlan, nullptr);
  rt.ready_gate(device_ops.get(), 1, 1, slot_expert.get(), nullptr);
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  rt.check_status();
  expect_bank(rt, ops, 0, rt.bank_of(1), "ipc");
  EXPECT_EQ(slot_expert.download(), expected_slot_expert(c, ops));
}

TEST(NcclPeerMemory, AutoReportsItsChoiceAndMulticastReason) {
  ISER_REQUIRE_GPUS(1);
  const ScopedEnv env("ISER_PEER_MEMORY", nullptr);
  const ScopedEnv nvls("NCCL_NVLS_ENABLE", "0");  // as on every lent machine
  Communicator comm = one_rank_communicator();
  RuntimeConfig c = one_rank_config();
  c.multicast = true;  // opted in, yet NCCL_NVLS_ENABLE=0 comes first: NCCL is never asked
  Runtime rt(c, comm);
  // This build and NCCL >= 2.28 register windows; the report names the choice either way.
  EXPECT_TRUE(rt.peer_memory() == PeerMemoryMode::kNccl ||
              rt.peer_memory() == PeerMemoryMode::kIpc);
  EXPECT_TRUE(contains(rt.describe(), "peer memory: " + std::string(to_string(rt.peer_memory()))))
      << rt.describe();
  EXPECT_TRUE(contains(rt.describe(), "multicast unavailable: ")) << rt.describe();
  EXPECT_TRUE(contains(rt.describe(), "NCCL_NVLS_ENABLE=0")) << rt.describe();
  std::printf("[ report   ] %s\n", rt.describe().c_str());
}

TEST(NcclPeerMemory, BadRequestIsRefusedNamingTheVariable) {
  ISER_REQUIRE_GPUS(1);
  const ScopedEnv env("ISER_PEER_MEMORY", "nvshmem");
  Communicator comm = one_rank_communicator();
  try {
    Runtime rt(one_rank_config(), comm);
    ADD_FAILURE() << "ISER_PEER_MEMORY=nvshmem accepted: " << rt.describe();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "rank 0 rejected its peer memory request")) << e.what();
    EXPECT_TRUE(contains(e.what(), "ISER_PEER_MEMORY=nvshmem")) << e.what();
  }
}

TEST(NcclPeerMemory, LogicalRanksReportLocalMemory) {
  ISER_REQUIRE_GPUS(1);
  RuntimeConfig c = one_rank_config();
  c.num_ranks = 2;
  auto rt = Runtime::logical(c);
  EXPECT_EQ(rt->peer_memory(), PeerMemoryMode::kLocal);
  EXPECT_TRUE(contains(rt->describe(), "peer memory: local (2 logical ranks")) << rt->describe();
  EXPECT_FALSE(rt->multicast_available());
}

// Two GPUs: auto picks the window on both ranks (one NVLink node, NCCL >= 2.28), with the same
// report; then rank 1 asks for ipc while rank 0 asks for auto, and both fail with the same
// diagnosis before anything is mapped.
TEST(MultiProcess, NcclWindowChosenAlikeAndMismatchRefusedOnEveryRank) {
  ISER_AS_RANKS(2, 120);
  Communicator comm = Communicator::from_unique_id_file(env->id_file, env->rank, env->world);
  RuntimeConfig c = one_rank_config();
  c.num_ranks = 2;
  c.num_experts = 8;
  {
    const ScopedEnv none("ISER_PEER_MEMORY", nullptr);
    Runtime rt(c, comm);
    EXPECT_EQ(rt.peer_memory(), PeerMemoryMode::kNccl) << rt.describe();
    EXPECT_TRUE(contains(rt.describe(), "LSA team of 2 rank")) << rt.describe();
    std::printf("[ report   ] rank %d: %s\n", env->rank, rt.describe().c_str());
  }
  const ScopedEnv mixed("ISER_PEER_MEMORY", env->rank == 1 ? "ipc" : "auto");
  try {
    Runtime rt(c, comm);
    ADD_FAILURE() << "rank " << env->rank << " accepted mixed peer memory: " << rt.describe();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1 asks for peer memory 'ipc' but rank 0 for 'auto'"))
        << e.what();
  }
}

}  // namespace
}  // namespace iser::testing
