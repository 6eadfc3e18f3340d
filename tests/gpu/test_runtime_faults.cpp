// Fault injection on one GPU (P = 4 logical ranks): a stalled copy (the READY gate times out, the
// affected routes fall back to home slots, the late copy harms nothing), a stalled owner of
// p2p-sami-host ops (its members' host lane times out; they publish READY failed), and a stalled
// consumer (the reuse fence keeps writers off its bank; READY says failed; routes fall back).
#include <gtest/gtest.h>

#include <random>

#include "iser/testing/hooks.h"
#include "runtime_test_util.h"

namespace iser::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kHome = 4;  // H
constexpr int kSlots = 2;

RuntimeConfig fault_config(double host_share = 0.0) {
  RuntimeConfig c;
  c.host_share = host_share;
  c.num_ranks = kRanks;
  c.num_experts = kRanks * kHome;
  c.num_slots = kSlots;
  c.bundle = {200000, 4096};
  c.copy_sms = 2;
  c.timeout_us = 200'000;  // 200 ms
  return c;
}

struct Routes {
  std::vector<int32_t> experts;  // [P][n]
  std::vector<int32_t> slots;    // [P][n] before the fallback
  std::vector<int32_t> want;     // [P][n] after the fallback
  uint64_t expected_fallbacks = 0;
};

// Routes of every rank: experts of the ops sent to a random member's helper slot, others home.
// `valid[k]` says whether op k's replica survives; routes to invalid replicas must go home.
Routes make_routes(const std::vector<CopyOp>& ops, const std::vector<bool>& valid, int per_rank,
                   std::mt19937& rng) {
  Routes r;
  const int slots_per_rank = kHome + kSlots;
  for (int src = 0; src < kRanks; ++src) {
    for (int n = 0; n < per_rank; ++n) {
      const int pick = static_cast<int>(rng() % (ops.size() + 1));
      int expert = 0;
      int slot = 0;
      int want = 0;
      if (n % 17 == 0) {  // padding route: stays -1
        expert = 0;
        slot = want = -1;
      } else if (pick < static_cast<int>(ops.size())) {
        const CopyOp& op = ops[pick];
        expert = op.expert;
        const int dst = op.group_begin + static_cast<int>(rng() % op.group_size);
        slot = dst * slots_per_rank + kHome + op.helper;
        want = valid[pick] ? slot : (expert / kHome) * slots_per_rank + expert % kHome;
        if (!valid[pick]) ++r.expected_fallbacks;
      } else {
        expert = static_cast<int>(rng() % (kRanks * kHome));
        slot = (expert / kHome) * slots_per_rank + expert % kHome;
        want = slot;
      }
      r.experts.push_back(expert);
      r.slots.push_back(slot);
      r.want.push_back(want);
    }
  }
  return r;
}

void expect_slot(Runtime& rt, const RuntimeConfig& c, const CopyOp& op, int bank,
                 bool should_match) {
  const auto src = bundle_pattern(c, op.owner, 0, op.expert % kHome);
  for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
    const auto got = read_device(rt.helper_slot(m, bank, op.helper), src.size());
    if (should_match) {
      EXPECT_EQ(got, src) << "replica of expert " << op.expert << " on rank " << m;
    } else {
      EXPECT_NE(got, src) << "expert " << op.expert << " on rank " << m << " was written";
    }
  }
}

// Rank 3's replicate (generation 1, under `transport`) stalls behind a kernel the host releases
// only after the READY gate of the other ranks returned: the gate times out for writer 3, and
// exactly the ops it writes (`valid[k]` false) lose their replica: `gate_want` is the expected
// slot_expert ([rank][helper]) and their routes fall back home. Once released, the late copy
// harms nothing and generation 2 replicates every op. `host_share` > 0 (p2p-sami-host): rank 3's
// members also wait for its host lane, time out there first (kHostLaneTimeout) and publish READY
// failed, so every op they write loses its replica too; the other ranks' first error may be
// either the gate's timeout or a failed READY.
void expect_stalled_rank3_falls_back(const std::vector<CopyOp>& ops, Transport transport,
                                     const std::vector<bool>& valid,
                                     const std::vector<int32_t>& gate_want,
                                     double host_share = 0.0) {
  const RuntimeConfig c = fault_config(host_share);
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  poison_helpers(*rt);
  const int num_ops = static_cast<int>(ops.size());
  DeviceVector<CopyOp> device_ops(ops);
  Stall stall;
  cudaStream_t main_stream = nullptr;
  cudaStream_t stalled = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stalled, cudaStreamNonBlocking));

  // Everything is allocated and uploaded first: cudaMalloc / cudaMemcpy may synchronise with
  // the stalled stream, and between the stall and the gate only launches may happen. The runtime
  // preloads its kernels at construction; with lazy module loading a first launch here would
  // otherwise wait for the stall (the failure this test saw before the preload).
  DeviceVector<int32_t> slot_expert(kRanks * kRanks * kSlots);
  std::mt19937 rng(5);
  const Routes routes = make_routes(ops, valid, 500, rng);
  DeviceVector<int32_t> experts(routes.experts);
  DeviceVector<int32_t> slots(routes.slots);
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());
  stall.hold(stalled, 5'000'000'000ull);
  ::iser::testing::replicate_ranks(*rt, 3, 4, device_ops.get(), num_ops, 0, 1, transport, stalled);
  ::iser::testing::replicate_ranks(*rt, 0, 3, device_ops.get(), num_ops, 0, 1, transport,
                                   main_stream);
  rt->ready_gate(device_ops.get(), num_ops, 1, slot_expert.get(), main_stream, transport);
  rt->fallback_rewrite(slot_expert.get(), experts.get(), slots.get(), 500, main_stream);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(main_stream));  // the gate returned: no hang
  // Copy results out on the main stream while the copy is still stalled (a plain cudaMemcpy
  // could wait for the stalled stream).
  std::vector<int32_t> got_slots(routes.slots.size());
  std::vector<int32_t> gate(kRanks * kRanks * kSlots);
  ISER_EXPECT_CUDA(cudaMemcpyAsync(got_slots.data(), slots.get(), got_slots.size() * 4,
                                   cudaMemcpyDeviceToHost, main_stream));
  ISER_EXPECT_CUDA(cudaMemcpyAsync(gate.data(), slot_expert.get(), gate.size() * 4,
                                   cudaMemcpyDeviceToHost, main_stream));
  ISER_EXPECT_CUDA(cudaStreamSynchronize(main_stream));
  const int stalled_done = cudaStreamQuery(stalled) == cudaSuccess;
  EXPECT_FALSE(stalled_done) << "the stalled copy finished before the gate gave up";
  stall.release();  // the late copy
  ISER_EXPECT_CUDA(cudaDeviceSynchronize());

  EXPECT_EQ(got_slots, routes.want);
  for (int i = 0; i < kRanks; ++i) {
    EXPECT_EQ(std::vector<int32_t>(gate.begin() + i * 8, gate.begin() + (i + 1) * 8), gate_want)
        << "gate of rank " << i;
  }
  for (int k = 0; k < num_ops; ++k) {
    if (valid[k]) expect_slot(*rt, c, ops[k], 0, true);
  }

  // The late copy completed; nothing that was decided changes, and the next generation works.
  uint64_t fallbacks = 0;
  for (int i = 0; i < kRanks; ++i) {
    const RuntimeStatus s = rt->status(i);
    EXPECT_EQ(s.tag, 1u) << s.message();
    fallbacks += s.fallback_routes;
    if (host_share <= 0.0) {
      EXPECT_EQ(s.code, StatusCode::kReadyTimeout) << s.message();
      EXPECT_EQ(s.peer, 3);
      continue;
    }
    bool fetches_from_3 = false;
    for (const CopyOp& op : ops) {
      fetches_from_3 = fetches_from_3 || (op.owner == 3 && i != 3 && i >= op.group_begin &&
                                          i < op.group_begin + op.group_size);
    }
    if (fetches_from_3) {
      EXPECT_EQ(s.code, StatusCode::kHostLaneTimeout) << "rank " << i << ": " << s.message();
      EXPECT_EQ(s.peer, 3);
    } else {
      EXPECT_TRUE(s.code == StatusCode::kReadyTimeout || s.code == StatusCode::kCopyFailed)
          << "rank " << i << ": " << s.message();
    }
  }
  EXPECT_EQ(fallbacks, routes.expected_fallbacks);
  EXPECT_GT(fallbacks, 0u);
  try {
    rt->check_status();
    ADD_FAILURE() << "check_status did not report the stalled writer";
  } catch (const Error& e) {
    const char* want = host_share > 0.0 ? "host lane: owner rank 3 never staged generation 1"
                                        : "writer rank 3 never published generation 1";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  rt->clear_status();
  rt->release_bank(1, main_stream);
  poison_helpers(*rt);
  rt->replicate(device_ops.get(), num_ops, 0, 2, transport, main_stream);
  rt->ready_gate(device_ops.get(), num_ops, 2, slot_expert.get(), main_stream, transport);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(main_stream));
  rt->check_status();
  expect_bank(*rt, ops, 0, 0, "generation after the stall");
  const auto want2 = expected_slot_expert(c, ops);
  const auto gate2 = slot_expert.download();
  EXPECT_TRUE(std::equal(want2.begin(), want2.end(), gate2.begin()));

  cudaStreamDestroy(main_stream);
  cudaStreamDestroy(stalled);
}

TEST(RuntimeFaults, StalledCopyFallsBackToHomeSlots) {
  ISER_REQUIRE_GPUS(1);
  // op 0: owner 0 direct to all; op 1: SAMI over {2, 3} (rank 3 writes half of it); op 2: owner
  // 1 direct to {0, 1}. Rank 3 stalls: only op 1 loses its replica. Gate, rank d helper h ->
  // expert: op 0 everywhere in helper 0; op 2 on {0, 1} helper 1; op 1 ({2, 3} helper 1) invalid.
  expect_stalled_rank3_falls_back({{1, 0, 0, 4, 0, TransportMode::kOwnerDirect},
                                   {13, 3, 2, 2, 1, TransportMode::kSami},
                                   {6, 1, 0, 2, 1, TransportMode::kOwnerDirect}},
                                  Transport::kPlan, {true, false, true},
                                  {1, 6, 1, 6, 1, -1, 1, -1});
}

// Owner-assisted SAMI: the gate waits for the owner outside the group as a writer. op 0: owner 3
// outside {0, 1} (writers 0, 1 and 3); op 1: owner 0 outside {2} (writers 2 and 0); op 2: owner 1
// inside {0, 1} (plain SAMI, writers 0 and 1). The owner of op 0 stalls: only op 0 loses its
// replica (under p2p-sami its members alone would have written it all). Gate: helper 0 of {0, 1}
// invalid, expert 6 in helper 1 of {0, 1}, expert 1 in helper 0 of 2.
const std::vector<CopyOp> kOwnerAssistedOps = {{13, 3, 0, 2, 0, TransportMode::kSamiOwner},
                                               {1, 0, 2, 1, 0, TransportMode::kSamiOwner},
                                               {6, 1, 0, 2, 1, TransportMode::kSamiOwner}};

TEST(RuntimeFaults, StalledOwnerOfOwnerAssistedOpFallsBack) {
  ISER_REQUIRE_GPUS(1);
  expect_stalled_rank3_falls_back(kOwnerAssistedOps, Transport::kP2PSamiOwner, {false, true, true},
                                  {-1, 6, -1, 6, 1, -1, -1, -1});
}

// p2p-sami-host, the same ops with a quarter of every bundle (6 of 25 slices, 2 chunks) on the
// host lane: members 0 and 1 wait for stalled owner 3's staging flags, give up after the timeout
// and publish READY failed; no replica survives (writers 0 and 1 write every op), every route to
// a helper slot falls back, and nobody hangs. Generation 2 then replicates every op.
TEST(RuntimeFaults, StalledOwnerOfHostLaneFallsBack) {
  ISER_REQUIRE_GPUS(1);
  expect_stalled_rank3_falls_back(kOwnerAssistedOps, Transport::kP2PSamiHost, {false, false, false},
                                  {-1, -1, -1, -1, -1, -1, -1, -1}, 0.25);
}

TEST(RuntimeFaults, StalledConsumerBlocksReuseAndFallsBack) {
  ISER_REQUIRE_GPUS(1);
  const RuntimeConfig c = fault_config();
  auto rt = Runtime::logical(c);
  fill_homes(*rt);
  poison_helpers(*rt);
  cudaStream_t stream = nullptr;
  ISER_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const runtime::RegionLayout layout = runtime::make_region_layout(c);
  // Generation 1: nothing to copy; every rank but 2 releases it (rank 2's consumer is stuck).
  rt->replicate(nullptr, 0, 0, 1, Transport::kPlan, stream);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  for (int r = 0; r < kRanks; ++r) {
    for (int d = 0; d < kRanks; ++d) {
      if (d == 2) continue;
      const uint64_t one = 1;
      ISER_EXPECT_CUDA(
          cudaMemcpy(static_cast<char*>(rt->peer_base(r)) + layout.consumed_flags + 8 * d, &one, 8,
                     cudaMemcpyHostToDevice));
    }
  }
  // Generation 2 (same bank): op 0 (owner 1 to all) must not touch rank 2; op 1 (owner 0 to
  // {0, 1}) is unaffected.
  const std::vector<CopyOp> ops = {{5, 1, 0, 4, 0, TransportMode::kOwnerDirect},
                                   {0, 0, 0, 2, 1, TransportMode::kOwnerDirect}};
  DeviceVector<CopyOp> device_ops(ops);
  DeviceVector<int32_t> slot_expert(kRanks * kRanks * kSlots);
  rt->replicate(device_ops.get(), 2, 0, 2, Transport::kPlan, stream);
  rt->ready_gate(device_ops.get(), 2, 2, slot_expert.get(), stream);
  std::mt19937 rng(11);
  const Routes routes = make_routes(ops, {false, true}, 300, rng);
  DeviceVector<int32_t> experts(routes.experts);
  DeviceVector<int32_t> slots(routes.slots);
  rt->fallback_rewrite(slot_expert.get(), experts.get(), slots.get(), 300, stream);
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(slots.download(), routes.want);
  const auto bank_on_2 = read_device(rt->helper_slot(2, 0, 0), c.bundle.slot_stride());
  EXPECT_TRUE(std::all_of(bank_on_2.begin(), bank_on_2.end(), [](uint8_t b) {
    return b == kPoison;
  })) << "a writer overwrote the bank of a consumer that never released it";
  expect_slot(*rt, c, ops[1], 0, true);
  const RuntimeStatus writer = rt->status(1);
  EXPECT_EQ(writer.code, StatusCode::kFenceTimeout) << writer.message();
  EXPECT_EQ(writer.peer, 2);
  const RuntimeStatus reader = rt->status(3);
  EXPECT_EQ(reader.code, StatusCode::kCopyFailed) << reader.message();
  EXPECT_EQ(reader.peer, 1);
  const auto flags = read_flags(*rt, 0, layout.ready_flags);
  EXPECT_EQ(flags[1], 2u * 2) << "writer 1 must publish generation 2 as failed";
  EXPECT_EQ(flags[0], 2u * 2 + 1);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace iser::testing
