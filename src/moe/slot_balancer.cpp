// Slot balancer (include/iser/slot_balancer.h): the copy-stream half of the graph-mode EP layer
// (src/moe/ep_graph_layer.cpp) for any bundle layout and for P logical ranks on one GPU.
//
//   caller stream  [release(prev)] -> `start`            ...  wait(`plan_ready`) -> home work
//   COPY (highest) wait(`start`) -> count -> count exchange -> plan + rewrite -> copy list
//                  -> `plan_ready` -> replicate -> READY gate -> `gate_done`
//   caller stream  ready(): wait(`gate_done`) -> refill -> helper work -> (next route) release
// NOTE: as in the graph layer, the gate runs on COPY after the replication so that device-side
// generations (kDeviceGeneration) order it after the replicate kernel's; every wait on COPY is
// bounded by the runtime's timeouts.
#include "iser/slot_balancer.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <utility>

#include "cuda/device_buffer.h"
#include "cuda/moe_graph_kernels.h"
#include "cuda/moe_kernels.h"
#include "iser/error.h"
#include "iser/testing/hooks.h"
#include "moe/order_event.h"
#include "runtime/layout.h"

namespace iser {
namespace {

using cuda::DeviceBuffer;
using moe::OrderEvent;

bool sm_transport(Transport transport) {
  return transport == Transport::kPlan || transport == Transport::kP2PDirect ||
         transport == Transport::kP2PSami || transport == Transport::kP2PSamiOwner;
}

// Field offsets inside one bundle and the bundle layout that holds them all.
BundleLayout make_bundle(const SlotBalancerConfig& config, std::vector<int64_t>& offsets) {
  int64_t end = 0;
  offsets.clear();
  for (const int64_t bytes : config.field_bytes) {
    const int64_t begin = runtime::align_up(end, SlotBalancerConfig::kFieldAlignment);
    offsets.push_back(begin);
    end = begin + bytes;
  }
  BundleLayout bundle;
  bundle.weight_bytes = runtime::align_up(end, 16);
  return bundle;
}

// The request's state between calls (host only; no routing value).
enum class Phase { kIdle, kRouted, kReplicated, kReady };

}  // namespace

void SlotBalancerConfig::validate() const {
  ISER_CHECK(num_ranks >= 2 && num_ranks <= kGpuMaxRanks,
             "slot balancer: num_ranks = {} not in [2, {}]", num_ranks, kGpuMaxRanks);
  ISER_CHECK(num_experts > 0 && num_experts % num_ranks == 0,
             "slot balancer: num_experts = {} must be a positive multiple of num_ranks = {}",
             num_experts, num_ranks);
  ISER_CHECK(num_slots >= 1 && num_slots <= cuda::GraphFallbackConfig::kMaxSlots,
             "slot balancer: num_slots = {} not in [1, {}]", num_slots,
             cuda::GraphFallbackConfig::kMaxSlots);
  ISER_CHECK(max_tokens >= 1, "slot balancer: max_tokens = {} must be >= 1", max_tokens);
  ISER_CHECK(top_k >= 1 && top_k <= num_experts, "slot balancer: top_k = {} not in [1, E = {}]",
             top_k, num_experts);
  ISER_CHECK(sm_transport(transport),
             "slot balancer: transport '{}' is not an SM transport (plan, p2p-direct, p2p-sami, "
             "p2p-sami-owner)",
             to_string(transport));
  ISER_CHECK(!field_bytes.empty(), "slot balancer: no weight fields");
  for (size_t f = 0; f < field_bytes.size(); ++f) {
    ISER_CHECK(field_bytes[f] > 0, "slot balancer: field_bytes[{}] = {} must be positive", f,
               field_bytes[f]);
  }
  const int64_t routes = int64_t{max_tokens} * top_k;
  ISER_CHECK(gpu_planner_covers(policy, Topology::make(num_ranks, num_experts, num_slots), routes),
             "slot balancer: policy '{}' (P {}, E {}, S {}, max_tokens * top_k = {}) is not "
             "covered by the GPU planner (the HALO-Q family, P <= {}, E <= {}, S <= {}, routes "
             "<= {})",
             policy, num_ranks, num_experts, num_slots, routes, kGpuMaxRanks, kGpuMaxExperts,
             kGpuMaxSlots, kGpuMaxRoutesPerRank);
}

struct SlotBalancer::Impl {
  SlotBalancerConfig config;
  std::vector<int64_t> offsets;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<GpuPlanner> planner;
  int num_local = 1;
  int max_ops = 0;
  cudaStream_t copy = nullptr;
  DeviceBuffer count_rows;                        // [num_local][E]
  DeviceBuffer matrix;                            // [num_local][P][E]
  DeviceBuffer plan;                              // [plan words]
  DeviceBuffer ops;                               // [max_ops] CopyOp
  DeviceBuffer num_ops;                           // one word
  DeviceBuffer slot_expert;                       // [num_local][P * S]
  DeviceBuffer fallback;                          // [num_local] uint32
  std::vector<cuda::GraphFallbackParams> refill;  // per local rank
  OrderEvent start, plan_ready, gate_done;
  int fault_rank = -1;
  cudaStream_t fault_stream = nullptr;
  // Faulted calls name their generation: the device counter, read when the fault stream is set
  // (CUDA-graph replays advance it without the host), plus one per replicate() since.
  uint64_t generation = 0;
  Phase phase = Phase::kIdle;
  uint64_t ready_failures = 0;
  std::string last_failure;

  ~Impl() {
    if (copy != nullptr) cudaStreamDestroy(copy);
  }
  void set_up(const SlotBalancerConfig& cfg, std::unique_ptr<Runtime> rt);
  void finish_previous(cudaStream_t stream);
};

void SlotBalancer::Impl::set_up(const SlotBalancerConfig& cfg, std::unique_ptr<Runtime> rt) {
  runtime = std::move(rt);
  num_local = runtime->num_local_ranks();
  const Topology topo = Topology::make(cfg.num_ranks, cfg.num_experts, cfg.num_slots);
  const int routes = cfg.max_tokens * cfg.top_k;
  planner = std::make_unique<GpuPlanner>(topo, routes, gpu_planner_options(cfg.policy), num_local);
  max_ops = planner->layout().max_broadcasts;
  ISER_CHECK(max_ops <= kMaxLocalCopyOps,
             "slot balancer: the GPU plan may hold {} broadcasts; the copy list holds at most {}",
             max_ops, kMaxLocalCopyOps);
  int lowest = 0, highest = 0;
  ISER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&copy, cudaStreamNonBlocking, highest));

  const size_t row = static_cast<size_t>(cfg.num_experts) * sizeof(int32_t);
  count_rows = DeviceBuffer(num_local * row);
  matrix = DeviceBuffer(static_cast<size_t>(num_local) * cfg.num_ranks * row);
  plan = DeviceBuffer(static_cast<size_t>(planner->plan_words()) * sizeof(int32_t));
  ops = DeviceBuffer(static_cast<size_t>(max_ops) * sizeof(CopyOp));
  num_ops = DeviceBuffer(sizeof(int32_t));
  slot_expert = DeviceBuffer(static_cast<size_t>(num_local) * cfg.num_ranks * cfg.num_slots * 4);
  fallback = DeviceBuffer(static_cast<size_t>(num_local) * sizeof(uint32_t));
  for (DeviceBuffer* buf : {&plan, &ops, &num_ops, &fallback}) {
    ISER_CUDA_CHECK(cudaMemset(buf->get(), 0, buf->bytes()));
  }

  // The refill's sources (home slots at the same offset of every rank's region) and destinations
  // (the local rank's helper slots of the only bank) are fixed.
  const char* base0 = static_cast<const char*>(runtime->peer_base(runtime->first_rank()));
  const char* home0 = static_cast<const char*>(runtime->home_bundle(0, 0, 0));
  refill.resize(num_local);
  for (int i = 0; i < num_local; ++i) {
    cuda::GraphFallbackParams& f = refill[i];
    f.ops = ops.get<CopyOp>();
    f.max_ops = max_ops;
    f.slot_expert =
        slot_expert.get<int32_t>() + static_cast<size_t>(i) * cfg.num_ranks * cfg.num_slots;
    f.rank = runtime->first_rank() + i;
    f.num_ranks = cfg.num_ranks;
    f.num_slots = cfg.num_slots;
    f.experts_per_rank = cfg.experts_per_rank();
    f.bytes = runtime->config().bundle.bytes();
    f.home_stride = runtime->config().bundle.slot_stride();
    f.fallback_slots = fallback.get<uint32_t>() + i;
    for (int r = 0; r < cfg.num_ranks; ++r) {
      f.home_base[r] = static_cast<const char*>(runtime->peer_base(r)) + (home0 - base0);
    }
    for (int h = 0; h < cfg.num_slots; ++h) f.dst[h] = runtime->helper_slot(i, 0, h);
  }
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
}

namespace {

RuntimeConfig runtime_config(const SlotBalancerConfig& config, std::vector<int64_t>& offsets) {
  config.validate();
  RuntimeConfig rc;
  rc.num_ranks = config.num_ranks;
  rc.num_experts = config.num_experts;
  rc.num_slots = config.num_slots;
  rc.bundle = make_bundle(config, offsets);
  rc.num_layers = 1;
  rc.num_banks = 1;
  rc.copy_sms = config.copy_sms;
  rc.timeout_us = config.timeout_us;
  return rc;
}

}  // namespace

SlotBalancer::SlotBalancer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SlotBalancer::SlotBalancer(const SlotBalancerConfig& config, Communicator& comm)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  const RuntimeConfig rc = runtime_config(config, impl_->offsets);
  impl_->set_up(config, std::make_unique<Runtime>(rc, comm));
}

std::unique_ptr<SlotBalancer> SlotBalancer::logical(const SlotBalancerConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  const RuntimeConfig rc = runtime_config(config, impl->offsets);
  impl->set_up(config, Runtime::logical(rc));
  return std::unique_ptr<SlotBalancer>(new SlotBalancer(std::move(impl)));
}

SlotBalancer::~SlotBalancer() {
  if (impl_ != nullptr && impl_->copy != nullptr) cudaStreamSynchronize(impl_->copy);
}

const SlotBalancerConfig& SlotBalancer::config() const {
  return impl_->config;
}
Runtime& SlotBalancer::runtime() const {
  return *impl_->runtime;
}
int SlotBalancer::num_local_ranks() const {
  return impl_->num_local;
}
int SlotBalancer::first_rank() const {
  return impl_->runtime->first_rank();
}
void* SlotBalancer::slots(int local_idx) const {
  return impl_->runtime->home_bundle(local_idx, 0, 0);
}
int64_t SlotBalancer::slot_stride() const {
  return impl_->runtime->config().bundle.slot_stride();
}
int64_t SlotBalancer::field_offset(int field) const {
  ISER_CHECK(field >= 0 && field < static_cast<int>(impl_->offsets.size()),
             "slot balancer: field {} not in [0, {})", field, impl_->offsets.size());
  return impl_->offsets[field];
}
int64_t SlotBalancer::region_bytes() const {
  return impl_->runtime->region_bytes();
}
StreamHandle SlotBalancer::copy_stream() const {
  return impl_->copy;
}
const int32_t* SlotBalancer::plan() const {
  return impl_->plan.get<int32_t>();
}
const GpuPlanLayout& SlotBalancer::plan_layout() const {
  return impl_->planner->layout();
}
const int32_t* SlotBalancer::count_matrix() const {
  return impl_->matrix.get<int32_t>();
}

void SlotBalancer::Impl::finish_previous(cudaStream_t stream) {
  // The previous invocation's helper bank is free once the caller's work before this point is
  // done. replicate() without ready(): wait for the gate first (the bank is released after the
  // copy into it, and a capture needs COPY joined). route() alone took no bank.
  if (phase == Phase::kReplicated) gate_done.wait(stream);
  if (phase == Phase::kReplicated || phase == Phase::kReady) {
    runtime->release_bank(kDeviceGeneration, stream);
  }
  phase = Phase::kIdle;
}

void SlotBalancer::release(StreamHandle stream) {
  impl_->finish_previous(stream);
}

void SlotBalancer::route(const int32_t* topk_ids, int num_tokens, int top_k, int32_t* slot_ids,
                         StreamHandle stream) {
  Impl& s = *impl_;
  const SlotBalancerConfig& c = s.config;
  ISER_CHECK(num_tokens >= 0 && num_tokens <= c.max_tokens,
             "slot balancer: num_tokens = {} not in [0, max_tokens = {}]", num_tokens,
             c.max_tokens);
  ISER_CHECK(top_k >= 1 && int64_t{num_tokens} * top_k <= int64_t{c.max_tokens} * c.top_k,
             "slot balancer: top_k = {}: {} x {} routes exceed max_tokens x top_k = {}", top_k,
             num_tokens, top_k, int64_t{c.max_tokens} * c.top_k);
  s.finish_previous(stream);
  s.start.record(stream);
  s.start.wait(s.copy);
  s.planner->count(topk_ids, num_tokens, top_k, s.count_rows.get<int32_t>(), s.copy, s.num_local);
  s.runtime->exchange_counts(s.count_rows.get<int32_t>(), s.matrix.get<int32_t>(),
                             kDeviceGeneration, s.copy);
  if (s.num_local == 1) {
    s.planner->plan_rewrite(s.matrix.get<int32_t>(), s.plan.get<int32_t>(), topk_ids, num_tokens,
                            top_k, s.runtime->first_rank(), slot_ids, s.copy);
  } else {
    // Every local rank sees the same matrix: one plan (local rank 0's) serves all of them.
    s.planner->plan_rewrite_all(s.matrix.get<int32_t>(), s.plan.get<int32_t>(), topk_ids,
                                num_tokens, top_k, 1, slot_ids, s.copy);
  }
  cuda::PlanCopyListParams list;
  list.plan = s.plan.get<int32_t>();
  list.broadcasts_offset = s.planner->layout().broadcasts();
  list.max_ops = s.max_ops;
  list.num_ranks = c.num_ranks;
  list.experts_per_rank = c.experts_per_rank();
  list.num_slots = c.num_slots;
  list.ops = s.ops.get<CopyOp>();
  list.num_ops = s.num_ops.get<int32_t>();
  cuda::launch_plan_copy_list(list, s.copy);
  s.plan_ready.record(s.copy);
  s.plan_ready.wait(stream);
  s.phase = Phase::kRouted;
}

void SlotBalancer::replicate() {
  Impl& s = *impl_;
  ISER_CHECK(s.phase == Phase::kRouted, "slot balancer: replicate() without a route() before it");
  // NOTE: max_ops entries, null ops past the plan's B: neither the replication nor the gate acts
  // on a null op (group_size 0).
  const auto run = [&](int begin, int end, cudaStream_t stream) {
    if (begin < end) {
      testing::replicate_ranks(*s.runtime, begin, end, s.ops.get<CopyOp>(), s.max_ops, 0,
                               s.generation, s.config.transport, stream, s.config.copy_sms);
    }
  };
  ++s.generation;
  uint64_t gate_generation = kDeviceGeneration;
  if (s.fault_rank < 0) {
    s.runtime->replicate(s.ops.get<CopyOp>(), s.max_ops, 0, kDeviceGeneration, s.config.transport,
                         s.copy, s.config.copy_sms);
  } else {
    // NOTE: the fault rank's replicate runs on another stream, so the gate on COPY may run before
    // it. A kDeviceGeneration gate would then see no new generation (and report kGateEarly): the
    // faulted call names its generation instead, and the gate waits for it (up to the timeout)
    // like a gate of a slow peer. The replicate leaves the device counter at that generation.
    gate_generation = s.generation;
    run(0, s.fault_rank, s.copy);
    run(s.fault_rank + 1, s.num_local, s.copy);
    s.plan_ready.wait(s.fault_stream);
    run(s.fault_rank, s.fault_rank + 1, s.fault_stream);
  }
  s.runtime->ready_gate(s.ops.get<CopyOp>(), s.max_ops, gate_generation,
                        s.slot_expert.get<int32_t>(), s.copy, s.config.transport);
  s.gate_done.record(s.copy);
  s.phase = Phase::kReplicated;
}

void SlotBalancer::set_fault_stream(int local_idx, StreamHandle stream) {
  Impl& s = *impl_;
  ISER_CHECK(local_idx < 0 || (s.num_local > 1 && local_idx < s.num_local && stream != nullptr),
             "slot balancer: fault stream for local rank {} needs logical mode, a rank in [0, {}) "
             "and a stream",
             local_idx, s.num_local);
  s.fault_rank = local_idx < 0 ? -1 : local_idx;
  if (local_idx >= 0) {
    // Documented (the faulted calls start from a drained device): status reads no longer
    // synchronise it.
    ISER_CUDA_CHECK(cudaDeviceSynchronize());
    s.generation = s.runtime->last_generation(0);
  }
  s.fault_stream = local_idx < 0 ? nullptr : stream;
}

void SlotBalancer::ready(StreamHandle stream) {
  Impl& s = *impl_;
  ISER_CHECK(s.phase == Phase::kReplicated, "slot balancer: ready() without a replicate()");
  s.gate_done.wait(stream);
  for (const cuda::GraphFallbackParams& f : s.refill) cuda::launch_graph_fallback(f, stream);
  s.phase = Phase::kReady;
}

SlotBalancerStats SlotBalancer::stats() {
  Impl& s = *impl_;
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
  SlotBalancerStats out;
  std::vector<uint32_t> fallback(s.num_local, 0);
  ISER_CUDA_CHECK(
      cudaMemcpy(fallback.data(), s.fallback.get(), s.fallback.bytes(), cudaMemcpyDeviceToHost));
  for (const uint32_t n : fallback) out.fallback_slots += n;
  ISER_CUDA_CHECK(
      cudaMemcpy(&out.num_ops, s.num_ops.get(), sizeof(int32_t), cudaMemcpyDeviceToHost));
  out.plan_status = download_plan_status(s.plan.get<int32_t>());
  out.planner_errors = s.planner->read_errors();
  s.planner->clear_errors(nullptr);
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
  bool failed = false;
  for (int i = 0; i < s.num_local; ++i) {
    const RuntimeStatus status = s.runtime->status(i);
    const bool ready_failure = status.code == StatusCode::kReadyTimeout ||
                               status.code == StatusCode::kCopyFailed ||
                               status.code == StatusCode::kReadyOvertaken;
    if (status.code == StatusCode::kOk) continue;
    ISER_CHECK(ready_failure, "slot balancer: rank {}: {}", s.runtime->first_rank() + i,
               status.message());
    failed = true;
    ++s.ready_failures;
    s.last_failure = status.message();
    std::fprintf(stderr,
                 "iser: slot balancer rank %d: %s; helper slots refilled from home bundles (%llu "
                 "so far on this process)\n",
                 s.runtime->first_rank() + i, status.message().c_str(),
                 static_cast<unsigned long long>(out.fallback_slots));
  }
  if (failed) s.runtime->clear_status();
  out.ready_failures = s.ready_failures;
  out.last_failure = s.last_failure;
  // NOTE: a refused copy list means a plan broadcast outside the topology, which the planner
  // never makes (its plans equal the CPU planner's); the helper routes of that invocation had no
  // replica, so this is reported as an error, not a fallback.
  ISER_CHECK(out.num_ops >= 0,
             "slot balancer: the last plan's copy list was refused (a broadcast outside the "
             "topology: internal error)");
  const uint32_t fatal = out.planner_errors & ~static_cast<uint32_t>(kGpuPlanNotOk);
  ISER_CHECK(fatal == 0, "slot balancer: GPU planner: {} (an expert id outside [-1, E)?)",
             describe_gpu_status(fatal));
  return out;
}

}  // namespace iser
