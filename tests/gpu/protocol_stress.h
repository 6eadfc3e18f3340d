// Stress harness of the replication protocol on P logical ranks of one GPU: every generation
// runs the count exchange and the replication of each group of ranks (up to 4 groups) on its own
// stream, and the READY gate, a consumer and the bank release on another, with spin delays
// injected at random points
// (before each exchange, each writer, the gate, the fallback rewrite and the release). The
// consumer compares every helper slot the gate validated with its owner's home bundle before
// anything else touches it, then poisons the bank (the next user of the bank must rewrite every
// byte), and the harness reconciles the exchanged matrices, the gate's slot map, the rewritten
// routes and the READY/fallback counters with what the host expects.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "iser/testing/hooks.h"
#include "runtime_test_util.h"
#include "stress_kernels.h"

namespace iser::testing {

struct StressConfig {
  int num_ranks = 4;
  int num_banks = 1;
  Transport transport = Transport::kPlan;
  CopyPath path = CopyPath::kBulk;
  double host_share = 0.0;  // p2p-sami-host
  uint32_t seed = 1;
  double stall_probability = 0.25;  // per injection point
  uint64_t max_stall_ns = 40'000;
  bool clear_status_each_generation = false;  // clear_status() while writers are in flight
  // Coupled (as in the EP layers, where the next generation's count exchange follows every
  // rank's gate): the next generation's writers wait for this generation's gate, and every
  // planned replica must be validated. Decoupled: writers may run ahead of the gates; a writer
  // with nothing to write in g+1 then publishes READY g+1 before a late gate read g, which the
  // gate refuses conservatively (kReadyOvertaken: -1, routes go home): allowed, counted.
  bool coupled = true;
  // Everything on one stream, every rank in one launch (runs where launches are serialized, as
  // under compute-sanitizer); the delays are still injected between the launches.
  bool one_stream = false;

  std::string name() const {
    return std::string(to_string(transport)) + "/" + std::string(to_string(path)) + "/P" +
           std::to_string(num_ranks) + "/banks" + std::to_string(num_banks) +
           (coupled ? "" : "/decoupled");
  }
};

// gtest prints parameters in test listings: the configuration's name, not its raw bytes.
inline void PrintTo(const StressConfig& config, std::ostream* os) {
  *os << config.name();
}

struct StressResult {
  int64_t generations = 0;
  uint64_t mismatches = 0;         // 16-byte words of validated slots that differ from the owner
  uint64_t validated = 0;          // (view, slot) pairs the consumer checked (gate said valid)
  uint64_t mapped_slots = 0;       // ... as counted on the host from the gate's maps
  uint64_t planned_slots = 0;      // (view, slot) pairs the copy lists fill
  uint64_t invalidated_slots = 0;  // decoupled: planned slots the gate conservatively refused
  uint64_t fallback_routes = 0;    // the runtime's counters, summed over the local ranks
  uint64_t expected_fallback_routes = 0;  // routes whose slot the gate's map does not validate
  int64_t matrix_errors = 0;              // exchanged counts that differ from the rows
  int64_t gate_errors = 0;   // slot-map entries that are neither the copy list's nor allowed -1
  int64_t flag_errors = 0;   // READY / release flags not at the last generation after a batch
  int64_t route_errors = 0;  // rewritten routes that differ from the gate's map
  int overtaken_ranks = 0;   // decoupled: ranks whose status is kReadyOvertaken
  std::vector<std::string> statuses;  // other non-ok runtime statuses
};

// Generation count of the stress tests: ISER_STRESS_GENERATIONS, else `fallback` (a tenth of it
// under ISER_TEST_SHORT, the sanitizer runs).
inline int64_t stress_generations(int64_t fallback) {
  if (const char* n = std::getenv("ISER_STRESS_GENERATIONS")) return std::atoll(n);
  return std::getenv("ISER_TEST_SHORT") ? std::max<int64_t>(fallback / 10, 8) : fallback;
}

class ProtocolStress {
 public:
  static constexpr int kHome = 2;     // H
  static constexpr int kSlots = 3;    // S
  static constexpr int kRoutes = 48;  // routes per rank per generation
  static constexpr int kBatch = 64;   // generations enqueued between host checks
  static constexpr int kMaxOps = 2 * kSlots;
  static constexpr int kWriterStreams = 4;

  explicit ProtocolStress(const StressConfig& config) : config_(config), rng_(config.seed) {
    RuntimeConfig& c = runtime_config_;
    c.num_ranks = config.num_ranks;
    c.num_experts = config.num_ranks * kHome;
    c.num_slots = kSlots;
    c.bundle = {3 * kSliceBytes + 4096 + 16, 1040};  // a partial last slice, scales after 256 B
    c.num_banks = config.num_banks;
    c.copy_sms = 2;
    c.copy_path = config.path;
    c.host_share = config.host_share;
    c.host_sms = 2;
    c.timeout_us = 5'000'000;  // no wait may give up: every delay here is far shorter
    EXPECT_EQ(preload_stress_kernels(), cudaSuccess);  // see stress_kernels.h
    EXPECT_EQ(preload_stall_kernel(), cudaSuccess);
    rt_ = Runtime::logical(c);
    fill_homes(*rt_);
    poison_helpers(*rt_);
    const int p = c.num_ranks;
    EXPECT_EQ(p % std::min(p, kWriterStreams), 0) << "P must be a multiple of the writer streams";
    streams_.resize(std::min(p, kWriterStreams) + 1);
    for (cudaStream_t& s : streams_) {
      EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    }
    EXPECT_EQ(cudaEventCreateWithFlags(&gated_, cudaEventDisableTiming), cudaSuccess);
    never_ = std::make_unique<DeviceVector<int>>(std::vector<int>{0});
    counters_ =
        std::make_unique<DeviceVector<unsigned long long>>(std::vector<unsigned long long>{0, 0});
    ops_ = std::make_unique<DeviceVector<CopyOp>>(kBatch * kMaxOps);
    rows_ = std::make_unique<DeviceVector<int32_t>>(kBatch * row_words());
    matrix_ = std::make_unique<DeviceVector<int32_t>>(kBatch * p * row_words());
    slot_expert_ = std::make_unique<DeviceVector<int32_t>>(kBatch * p * map_words());
    route_experts_ = std::make_unique<DeviceVector<int32_t>>(kBatch * p * kRoutes);
    route_slots_ = std::make_unique<DeviceVector<int32_t>>(kBatch * p * kRoutes);
  }
  ~ProtocolStress() {
    cudaDeviceSynchronize();
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
    cudaEventDestroy(gated_);
  }
  ProtocolStress(const ProtocolStress&) = delete;
  ProtocolStress& operator=(const ProtocolStress&) = delete;

  Runtime& runtime() { return *rt_; }
  uint64_t next_generation() const { return generation_ + 1; }

  // Runs `generations` more generations (explicit generations and epochs, continuing).
  StressResult run(int64_t generations) {
    StressResult r;
    for (int64_t done = 0; done < generations; done += kBatch) {
      run_batch(static_cast<int>(std::min<int64_t>(kBatch, generations - done)), r);
    }
    const std::vector<unsigned long long> counters = counters_->download();
    r.mismatches = counters[0];
    r.validated = counters[1];
    for (int i = 0; i < rt_->num_local_ranks(); ++i) {
      const RuntimeStatus s = rt_->status(i);
      r.fallback_routes += s.fallback_routes;
      if (s.code == StatusCode::kReadyOvertaken && !config_.coupled) {
        ++r.overtaken_ranks;
      } else if (s.code != StatusCode::kOk) {
        r.statuses.push_back("rank " + std::to_string(i) + ": " + s.message());
      }
    }
    return r;
  }

 private:
  int row_words() const { return runtime_config_.num_ranks * runtime_config_.num_experts; }
  int map_words() const { return runtime_config_.num_ranks * kSlots; }

  void maybe_stall(cudaStream_t stream) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng_) >= config_.stall_probability) return;
    const uint64_t ns = 1 + rng_() % config_.max_stall_ns;
    EXPECT_EQ(launch_stall(never_->get(), ns, stream), cudaSuccess);
  }

  // Routes of every rank: to a replica, to a helper slot with another expert (or none), to a
  // home slot, or padding (-1). Where each must land follows from the gate's slot map.
  void make_routes(const std::vector<CopyOp>& ops, std::vector<int32_t>& experts,
                   std::vector<int32_t>& slots) {
    const RuntimeConfig& c = runtime_config_;
    const int per_rank = kHome + kSlots;
    for (int i = 0; i < c.num_ranks * kRoutes; ++i) {
      const int kind = static_cast<int>(rng_() % 4);
      int32_t expert = static_cast<int32_t>(rng_() % c.num_experts);
      int32_t slot = (expert / kHome) * per_rank + expert % kHome;
      if (kind == 0 && !ops.empty()) {
        const CopyOp& op = ops[rng_() % ops.size()];
        expert = op.expert;
        slot = (op.group_begin + static_cast<int>(rng_() % op.group_size)) * per_rank + kHome +
               op.helper;
      } else if (kind == 1) {
        const int d = static_cast<int>(rng_() % c.num_ranks);
        const int h = static_cast<int>(rng_() % kSlots);
        slot = d * per_rank + kHome + h;
      } else if (kind == 3) {
        slot = -1;
      }
      experts.push_back(expert);
      slots.push_back(slot);
    }
  }

  // Where a route of a rank whose gate wrote `map` ([P*S]) must land after the fallback.
  int32_t route_target(const int32_t* map, int32_t expert, int32_t slot) const {
    const int per_rank = kHome + kSlots;
    if (slot < 0 || slot % per_rank < kHome) return slot;
    const int d = slot / per_rank;
    const int h = slot % per_rank - kHome;
    if (map[d * kSlots + h] == expert) return slot;
    return (expert / kHome) * per_rank + expert % kHome;
  }

  StressCheckParams check_params(int bank, const int32_t* slot_expert) const {
    const RuntimeConfig& c = runtime_config_;
    const runtime::RegionLayout layout = runtime::make_region_layout(c);
    StressCheckParams p;
    p.slot_expert = slot_expert;
    p.base = static_cast<char*>(rt_->peer_base(0));
    p.region_bytes = rt_->region_bytes();
    p.helper_offset = layout.helper_slot(bank, 0);
    p.home_offset = layout.home_slot(0, 0);
    p.slot_stride = layout.slot_stride;
    p.bundle_bytes = layout.bundle_bytes;
    p.num_views = c.num_ranks;
    p.num_ranks = c.num_ranks;
    p.num_slots = kSlots;
    p.experts_per_rank = kHome;
    p.poison = kPoison;
    p.mismatches = counters_->get();
    p.validated = counters_->get() + 1;
    return p;
  }

  void run_batch(int count, StressResult& r) {
    const RuntimeConfig& c = runtime_config_;
    const int p = c.num_ranks;
    std::vector<std::vector<CopyOp>> ops(count);
    std::vector<CopyOp> all_ops(static_cast<size_t>(kBatch) * kMaxOps);
    std::vector<int32_t> rows(static_cast<size_t>(kBatch) * row_words());
    std::vector<int32_t> experts, slots;
    for (int b = 0; b < count; ++b) {
      ops[b] = random_ops(c, rng_, kMaxOps);
      std::copy(ops[b].begin(), ops[b].end(), all_ops.begin() + b * kMaxOps);
      for (const CopyOp& op : ops[b]) r.planned_slots += uint64_t(p) * op.group_size;
      for (int k = 0; k < row_words(); ++k) {
        rows[static_cast<size_t>(b) * row_words() + k] = static_cast<int32_t>(rng_() % 100000);
      }
      make_routes(ops[b], experts, slots);
    }
    ops_->upload(all_ops);
    rows_->upload(rows);
    route_experts_->upload(experts);
    route_slots_->upload(slots);
    // NOTE: ranks that spin on each other (count exchange, host lane) must never queue behind
    // one another, so ranks sharing a stream share a launch; and at most kWriterStreams + 1
    // streams, fewer than CUDA's default 8 hardware queues (streams beyond would share queues,
    // i.e. wait on each other's kernels).
    const int num_writer_launches = config_.one_stream ? 1 : std::min(p, kWriterStreams);
    const int ranks_per_launch = p / num_writer_launches;
    const auto writer = [&](int launch) { return streams_[config_.one_stream ? 0 : launch]; };
    cudaStream_t gate = streams_[config_.one_stream ? 0 : num_writer_launches];
    for (int b = 0; b < count; ++b) {
      const uint64_t g = ++generation_;
      const CopyOp* device_ops = ops_->get() + b * kMaxOps;
      const int num_ops = static_cast<int>(ops[b].size());
      for (int l = 0; l < num_writer_launches; ++l) {
        maybe_stall(writer(l));
        ::iser::testing::exchange_counts_ranks(
            *rt_, l * ranks_per_launch, (l + 1) * ranks_per_launch, rows_->get() + b * row_words(),
            matrix_->get() + b * p * row_words(), g, writer(l));
      }
      if (config_.transport == Transport::kCopyEngine) {
        maybe_stall(writer(0));
        rt_->replicate_copy_engine(ops[b], 0, g, writer(0));
      } else {
        for (int l = 0; l < num_writer_launches; ++l) {
          maybe_stall(writer(l));
          ::iser::testing::replicate_ranks(*rt_, l * ranks_per_launch, (l + 1) * ranks_per_launch,
                                           device_ops, num_ops, 0, g, config_.transport, writer(l));
        }
      }
      int32_t* slot_expert = slot_expert_->get() + b * p * map_words();
      const StressCheckParams params = check_params(rt_->bank_of(g), slot_expert);
      maybe_stall(gate);
      rt_->ready_gate(device_ops, num_ops, g, slot_expert, gate, config_.transport);
      if (config_.coupled && !config_.one_stream) {
        // The next generation's writers start after every gate of this one (as in the layers).
        EXPECT_EQ(cudaEventRecord(gated_, gate), cudaSuccess);
        for (int l = 0; l < num_writer_launches; ++l) {
          EXPECT_EQ(cudaStreamWaitEvent(writer(l), gated_), cudaSuccess);
        }
      }
      EXPECT_EQ(launch_check_replicas(params, gate), cudaSuccess);
      maybe_stall(gate);
      rt_->fallback_rewrite(slot_expert, route_experts_->get() + b * p * kRoutes,
                            route_slots_->get() + b * p * kRoutes, kRoutes, gate);
      EXPECT_EQ(launch_poison_slots(params, gate), cudaSuccess);
      maybe_stall(gate);
      rt_->release_bank(g, gate);
      if (config_.clear_status_each_generation) rt_->clear_status();
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    r.generations += count;
    // Exchanged matrices: every rank's view holds every rank's row of that epoch.
    const std::vector<int32_t> matrix = matrix_->download();
    for (int b = 0; b < count; ++b) {
      for (int i = 0; i < p; ++i) {
        for (int k = 0; k < row_words(); ++k) {
          r.matrix_errors += matrix[(static_cast<size_t>(b) * p + i) * row_words() + k] !=
                             rows[static_cast<size_t>(b) * row_words() + k];
        }
      }
    }
    // The gate's slot map, in every view: exactly the copy list's replicas (decoupled: or -1,
    // a conservative invalidation).
    const std::vector<int32_t> maps = slot_expert_->download();
    for (int b = 0; b < count; ++b) {
      const std::vector<int32_t> expect = expected_slot_expert(c, ops[b]);
      for (int i = 0; i < p; ++i) {
        for (int k = 0; k < map_words(); ++k) {
          const int32_t got = maps[(static_cast<size_t>(b) * p + i) * map_words() + k];
          r.mapped_slots += got >= 0;
          if (got == expect[k]) continue;
          if (!config_.coupled && got == -1) {
            ++r.invalidated_slots;
          } else {
            ++r.gate_errors;
          }
        }
      }
    }
    // Every writer published the last generation as complete (2g + 1) to every rank, and every
    // consumer released it.
    const runtime::RegionLayout layout = runtime::make_region_layout(c);
    for (int d = 0; d < p; ++d) {
      for (const uint64_t v : read_flags(*rt_, d, layout.ready_flags)) {
        r.flag_errors += v != 2 * generation_ + 1;
      }
      for (const uint64_t v : read_flags(*rt_, d, layout.consumed_flags)) {
        r.flag_errors += v != generation_;
      }
    }
    // Every route lands where the gate's map of its rank says; the fallback count follows.
    const std::vector<int32_t> got = route_slots_->download();
    for (int b = 0; b < count; ++b) {
      for (int i = 0; i < p; ++i) {
        const int32_t* map = maps.data() + (static_cast<size_t>(b) * p + i) * map_words();
        for (int n = 0; n < kRoutes; ++n) {
          const size_t k = (static_cast<size_t>(b) * p + i) * kRoutes + n;
          const int32_t want = route_target(map, experts[k], slots[k]);
          r.route_errors += got[k] != want;
          r.expected_fallback_routes += want != slots[k];
        }
      }
    }
  }

  StressConfig config_;
  RuntimeConfig runtime_config_;
  std::mt19937 rng_;
  std::unique_ptr<Runtime> rt_;
  std::vector<cudaStream_t> streams_;         // writer streams, then the gate/consumer stream
  cudaEvent_t gated_ = nullptr;               // coupled: recorded after each generation's gate
  std::unique_ptr<DeviceVector<int>> never_;  // the stall flag, never set: a stall is a delay
  std::unique_ptr<DeviceVector<unsigned long long>> counters_;  // mismatches, validated
  std::unique_ptr<DeviceVector<CopyOp>> ops_;
  std::unique_ptr<DeviceVector<int32_t>> rows_, matrix_, slot_expert_, route_experts_, route_slots_;
  uint64_t generation_ = 0;
};

}  // namespace iser::testing
