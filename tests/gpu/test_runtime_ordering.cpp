// Ordering faults of the replication protocol, each provoked on one GPU (P = 4 logical ranks):
// a rank that runs its count exchange late, after its peers timed out and moved on; a
// kDeviceGeneration READY gate that runs before its replicate; clear_status() after a fault with
// replications in flight; and an EP layer given two helper banks.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "iser/moe_ep_layer.h"
#include "iser/testing/hooks.h"
#include "protocol_stress.h"
#include "runtime_test_util.h"

namespace iser::testing {
namespace {

constexpr int kRanks = 4;

RuntimeConfig ordering_config(int64_t timeout_us) {
  RuntimeConfig c;
  c.num_ranks = kRanks;
  c.num_experts = kRanks * 4;
  c.num_slots = 2;
  c.bundle = {40000, 1024};
  c.copy_sms = 2;
  c.timeout_us = timeout_us;
  return c;
}

// Rank 0's count exchange is held back while ranks 1-3 run epochs 1-4, each of which times out
// waiting for rank 0. Rank 0 then runs epochs 1-3: epochs 1 and 2 must give exactly those
// epochs' rows (the peers' rows of epoch 3 and 4 overwrite the parity buffers of epochs 1 and 2
// only in regions whose owner is done reading them); epoch 3 must be reported as overtaken (the
// peers skipped rank 0 then), not handed out as a stale or torn matrix.
TEST(RuntimeOrdering, LateCountExchangeReadsItsEpochOrReportsOvertaken) {
  ISER_REQUIRE_GPUS(1);
  const RuntimeConfig c = ordering_config(20'000);
  auto rt = Runtime::logical(c);
  const int e = c.num_experts;
  constexpr int kEpochs = 4;
  std::vector<std::vector<int32_t>> rows(kEpochs + 1);
  std::vector<std::unique_ptr<DeviceVector<int32_t>>> device_rows, matrices;
  for (int epoch = 0; epoch <= kEpochs; ++epoch) {
    for (int r = 0; r < kRanks; ++r) {
      for (int x = 0; x < e; ++x) rows[epoch].push_back(epoch * 100000 + r * 1000 + x);
    }
    device_rows.push_back(std::make_unique<DeviceVector<int32_t>>(rows[epoch]));
    matrices.push_back(std::make_unique<DeviceVector<int32_t>>(kRanks * kRanks * e));
  }
  cudaStream_t late = nullptr, rest = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&late, cudaStreamNonBlocking));
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&rest, cudaStreamNonBlocking));
  Stall stall;
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());

  stall.hold(late);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    ::iser::testing::exchange_counts_ranks(*rt, 0, 1, device_rows[epoch]->get(),
                                           matrices[epoch]->get(), epoch, late);
  }
  for (int epoch = 1; epoch <= kEpochs; ++epoch) {
    ::iser::testing::exchange_counts_ranks(*rt, 1, kRanks, device_rows[epoch]->get(),
                                           matrices[epoch]->get(), epoch, rest);
  }
  ISER_EXPECT_CUDA(cudaStreamSynchronize(rest));
  stall.release();
  ISER_EXPECT_CUDA(cudaStreamSynchronize(late));

  for (int epoch = 1; epoch <= 2; ++epoch) {
    const std::vector<int32_t> got = matrices[epoch]->download();
    const std::vector<int32_t> view(got.begin(), got.begin() + kRanks * e);  // rank 0's matrix
    EXPECT_EQ(view, rows[epoch]) << "rank 0's count matrix of epoch " << epoch;
  }
  const RuntimeStatus late_status = rt->status(0);
  EXPECT_EQ(late_status.code, StatusCode::kCountOvertaken) << late_status.message();
  EXPECT_EQ(late_status.tag, 3u) << late_status.message();
  for (int r = 1; r < kRanks; ++r) {
    const RuntimeStatus s = rt->status(r);
    EXPECT_EQ(s.code, StatusCode::kCountTimeout) << "rank " << r << ": " << s.message();
    EXPECT_EQ(s.peer, 0) << s.message();
  }
  cudaStreamDestroy(late);
  cudaStreamDestroy(rest);
}

// Two copy lists with different replicas in the same slots.
std::vector<CopyOp> ops_a() {
  return {{5, 1, 0, 4, 0, TransportMode::kOwnerDirect}, {9, 2, 0, 2, 1, TransportMode::kSami}};
}
std::vector<CopyOp> ops_b() {
  return {{14, 3, 0, 4, 1, TransportMode::kSami}, {2, 0, 2, 2, 0, TransportMode::kOwnerDirect}};
}

// Generation 1 runs in order (replicate, then the gate and the release on another stream after
// an event). Generation 2's replicate is held back and its kDeviceGeneration gate runs first: it
// must not validate generation 2's list against generation 1's bytes; it reports kGateEarly and
// validates nothing, and the kDeviceGeneration release behind it releases nothing. Once the
// replicate ran, a gate in order validates generation 2 and its bytes are its owners'.
TEST(RuntimeOrdering, DeviceGenerationGateBeforeItsReplicateValidatesNothing) {
  ISER_REQUIRE_GPUS(1);
  const RuntimeConfig c = ordering_config(2'000'000);
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  poison_helpers(*rt);
  DeviceVector<CopyOp> list_a(ops_a()), list_b(ops_b());
  DeviceVector<int32_t> slot_expert(kRanks * kRanks * c.num_slots);
  cudaStream_t copy = nullptr, main = nullptr;
  cudaEvent_t replicated = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  ISER_EXPECT_CUDA(cudaEventCreateWithFlags(&replicated, cudaEventDisableTiming));
  Stall stall;
  const runtime::RegionLayout layout = runtime::make_region_layout(c);

  rt->replicate(list_a.get(), 2, 0, kDeviceGeneration, Transport::kPlan, copy);
  ISER_EXPECT_CUDA(cudaEventRecord(replicated, copy));
  ISER_EXPECT_CUDA(cudaStreamWaitEvent(main, replicated));
  rt->ready_gate(list_a.get(), 2, kDeviceGeneration, slot_expert.get(), main);
  rt->release_bank(kDeviceGeneration, main);
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  rt->check_status();

  stall.hold(copy);
  rt->replicate(list_b.get(), 2, 0, kDeviceGeneration, Transport::kPlan, copy);
  rt->ready_gate(list_b.get(), 2, kDeviceGeneration, slot_expert.get(), main);
  rt->release_bank(kDeviceGeneration, main);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(main));
  std::vector<int32_t> early(slot_expert.download());
  EXPECT_EQ(early, std::vector<int32_t>(early.size(), -1))
      << "a gate that ran before its replicate validated slots";
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(read_flags(*rt, r, layout.consumed_flags), std::vector<uint64_t>(kRanks, 1))
        << "rank " << r << ": a release that ran before its replicate released something";
  }
  stall.release();
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < kRanks; ++i) {
    const RuntimeStatus s = rt->status(i);
    EXPECT_EQ(s.code, StatusCode::kGateEarly) << "rank " << i << ": " << s.message();
    EXPECT_EQ(s.tag, 1u) << s.message();
  }
  rt->clear_status();

  ISER_EXPECT_CUDA(cudaEventRecord(replicated, copy));
  ISER_EXPECT_CUDA(cudaStreamWaitEvent(main, replicated));
  rt->ready_gate(list_b.get(), 2, kDeviceGeneration, slot_expert.get(), main);
  rt->release_bank(kDeviceGeneration, main);
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  rt->check_status();
  const std::vector<int32_t> want = expected_slot_expert(c, ops_b());
  const std::vector<int32_t> got = slot_expert.download();
  for (int i = 0; i < kRanks; ++i) {
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + i * want.size()))
        << "gate of rank " << i << " after the replicate";
  }
  for (const CopyOp& op : ops_b()) {
    const auto src = bundle_pattern(c, op.owner, 0, op.expert % c.experts_per_rank());
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      EXPECT_EQ(read_device(rt->helper_slot(m, 0, op.helper), src.size()), src)
          << "expert " << op.expert << " on rank " << m;
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(read_flags(*rt, r, layout.consumed_flags), std::vector<uint64_t>(kRanks, 2));
  }
  cudaEventDestroy(replicated);
  cudaStreamDestroy(copy);
  cudaStreamDestroy(main);
}

// A fault (a kDeviceGeneration gate before any replicate), clear_status(), then 1,000
// generations of the stress harness with clear_status() called right after each generation was
// enqueued, i.e. while its writers run on other streams: every validated slot still holds its
// owner's bytes, every gate sees every writer (the replicate kernel's completion counters are not
// the status words), and every route lands where the copy list says.
TEST(RuntimeOrdering, ClearStatusAfterAFaultLeavesLaterGenerationsIntact) {
  ISER_REQUIRE_GPUS(1);
  for (const int banks : {1, 2}) {
    StressConfig config;
    config.num_banks = banks;
    config.seed = 77 + banks;
    config.clear_status_each_generation = true;
    ProtocolStress stress(config);
    Runtime& rt = stress.runtime();
    DeviceVector<int32_t> slot_expert(kRanks * kRanks * ProtocolStress::kSlots);
    rt.ready_gate(nullptr, 0, kDeviceGeneration, slot_expert.get(), nullptr);
    EXPECT_EQ(rt.status(0).code, StatusCode::kGateEarly) << rt.status(0).message();
    rt.clear_status();
    rt.check_status();
    const StressResult r = stress.run(stress_generations(1000));
    EXPECT_EQ(r.mismatches, 0u) << banks << " bank(s)";
    EXPECT_EQ(r.validated, r.planned_slots) << banks << " bank(s)";
    EXPECT_EQ(r.mapped_slots, r.planned_slots) << banks << " bank(s)";
    EXPECT_EQ(r.matrix_errors, 0);
    EXPECT_EQ(r.gate_errors, 0);
    EXPECT_EQ(r.route_errors, 0);
    EXPECT_EQ(r.flag_errors, 0);
    for (const std::string& s : r.statuses) ADD_FAILURE() << s;
  }
}

// EpMoeLayer and GraphEpMoeLayer bind their helper GEMMs to bank 0: a runtime with two banks is
// refused by name (it used to replicate every other generation into a bank no GEMM reads).
TEST(RuntimeOrdering, EpLayersRefuseTwoHelperBanks) {
  moe::LayerConfig layer;
  layer.topo = Topology::make(2, 16, 2, /*g_min=*/2);
  layer.shape = {2048, 1024};
  layer.top_k = 4;
  layer.tokens_per_rank = 256;
  RuntimeConfig rc = moe::ep_runtime_config(layer);
  EXPECT_NO_THROW(moe::check_ep_runtime_config(layer, rc, "ep layer"));
  rc.num_banks = 2;
  try {
    moe::check_ep_runtime_config(layer, rc, "ep layer");
    ADD_FAILURE() << "a two-bank runtime was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_banks = 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace iser::testing
