// Reference EP MoE layer, one process per GPU (include/iser/moe_ep_layer.h).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/counts.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/moe_ep_layer.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/validator.h"
#include "moe/routing_maps.h"

namespace iser::moe {

using cuda::DeviceBuffer;
namespace {

class Event {
 public:
  Event() { ISER_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) { ISER_CUDA_CHECK(cudaEventRecord(event_, stream)); }

 private:
  cudaEvent_t event_ = nullptr;
};

float elapsed_ms(const Event& from, const Event& to) {
  float ms = 0;
  ISER_CUDA_CHECK(cudaEventElapsedTime(&ms, from.get(), to.get()));
  return ms;
}

double since_us(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

// The GPU-planned invocation's device block, read back to the host in one copy after the plan:
//   [0]              ops plan_copy_list took from the plan (its num_ops word)
//   [ops_offset]     CopyOp[max_ops], the replicate kernel's copy list (null ops after the plan's)
//   [matrix_offset]  the exchanged counts [P][E] (the count exchange writes them here)
//   [plan_offset]    the plan (GpuPlanLayout words)
// The read-back stops before the plan's rewrite tables, which the host does not decode.
struct PlanBlock {
  static constexpr int kAlignWords = 32;  // 128 bytes
  int max_ops = 0;
  int ops_offset = 0;
  int matrix_offset = 0;
  int plan_offset = 0;
  int readback_words = 0;
  int total_words = 0;

  static int align(int words) { return (words + kAlignWords - 1) / kAlignWords * kAlignWords; }
  static PlanBlock make(const GpuPlanLayout& layout) {
    static_assert(sizeof(CopyOp) % sizeof(int32_t) == 0);
    constexpr int kOpWords = sizeof(CopyOp) / sizeof(int32_t);
    PlanBlock b;
    b.max_ops = layout.max_broadcasts;
    b.ops_offset = 1;
    b.matrix_offset = align(b.ops_offset + b.max_ops * kOpWords);
    b.plan_offset = align(b.matrix_offset + layout.num_ranks * layout.num_experts);
    b.readback_words = b.plan_offset + layout.expert_broadcast();
    b.total_words = b.plan_offset + layout.total_words();
    return b;
  }
};

}  // namespace

std::string_view to_string(PlannerKind planner) {
  switch (planner) {
    case PlannerKind::kHost:
      return "host";
    case PlannerKind::kGpu:
      return "gpu";
    case PlannerKind::kAuto:
      return "auto";
  }
  return "?";
}

PlannerKind planner_from_string(std::string_view name) {
  if (name == "host") return PlannerKind::kHost;
  if (name == "gpu") return PlannerKind::kGpu;
  if (name == "auto") return PlannerKind::kAuto;
  throw Error(fmt::format("planner '{}': expected auto, gpu or host", name));
}

std::vector<SlotWeights> ep_slot_weights(const LayerConfig& config, Runtime& runtime) {
  std::vector<SlotWeights> weights;
  const int64_t w13_bytes = config.shape.w13_elems() * 2;
  for (int h = 0; h < config.topo.experts_per_rank(); ++h) {
    auto* bundle = static_cast<char*>(runtime.home_bundle(0, 0, h));
    weights.push_back({bundle, bundle + w13_bytes});
  }
  for (int h = 0; h < config.topo.num_slots; ++h) {
    auto* slot = static_cast<char*>(runtime.helper_slot(0, 0, h));
    weights.push_back({slot, slot + w13_bytes});
  }
  return weights;
}

void fill_ep_weights(const LayerConfig& config, Runtime& runtime, int rank, ExpertBank& shared,
                     uint64_t seed, float scale, Stream stream) {
  const Topology& topo = config.topo;
  const int64_t w13_bytes = config.shape.w13_elems() * 2;
  for (int h = 0; h < topo.experts_per_rank(); ++h) {
    auto* bundle = static_cast<char*>(runtime.home_bundle(0, 0, h));
    fill_expert_random(bundle, bundle + w13_bytes, config.shape, topo.first_home_expert(rank) + h,
                       seed, scale, stream);
  }
  fill_expert_random(shared.w13(0), shared.w2(0), config.shape, topo.num_experts, seed, scale,
                     stream);
  ISER_CUDA_CHECK(cudaStreamSynchronize(stream));
}

RuntimeConfig ep_runtime_config(const LayerConfig& config) {
  RuntimeConfig rc;
  rc.num_ranks = config.topo.num_ranks;
  rc.num_experts = config.topo.num_experts;
  rc.num_slots = config.topo.num_slots;
  rc.bundle.weight_bytes = config.shape.bundle_bytes();
  rc.bundle.scale_bytes = 0;
  rc.num_layers = 1;
  rc.num_banks = 1;
  return rc;
}

void check_ep_runtime_config(const LayerConfig& config, const RuntimeConfig& have,
                             std::string_view layer) {
  const RuntimeConfig want = ep_runtime_config(config);
  ISER_CHECK(have.num_ranks == want.num_ranks && have.num_experts == want.num_experts &&
                 have.num_slots == want.num_slots && have.bundle == want.bundle &&
                 have.num_layers >= 1,
             "{}: runtime config (P {}, E {}, S {}, bundle {} B) does not match the layer "
             "(P {}, E {}, S {}, bundle {} B)",
             layer, have.num_ranks, have.num_experts, have.num_slots, have.bundle.weight_bytes,
             want.num_ranks, want.num_experts, want.num_slots, want.bundle.weight_bytes);
  // NOTE: the helper GEMMs hold the addresses of one bank's slots (ep_slot_weights), while
  // generation g replicates into bank g % num_banks: with two banks every other invocation would
  // compute on the other bank (zeros, or a released generation's experts being overwritten).
  ISER_CHECK(have.num_banks == 1,
             "{}: runtime config num_banks = {}; the layer's helper GEMMs are bound to one helper "
             "bank (use num_banks = 1)",
             layer, have.num_banks);
}

// The layer's state, in parts: what set-up fixes (configuration, streams, experts, device
// buffers, the GPU planner's block), the events one invocation records, the test hooks, and what
// one invocation leaves for the next forward() and for finish().
struct EpMoeLayer::Impl {
  // Hidden-state rows [max_rows][hidden] bf16 on their way through dispatch, experts and combine
  // (shared_out: [tau][hidden], the shared expert's output).
  struct TokenBuffers {
    DeviceBuffer send_buf, recv_buf, x_expert, y_expert, y_back, comb_buf, shared_out;
  };
  // The routing maps on the device (RoutingMaps, uploaded per invocation) and the route weights.
  struct RouteBuffers {
    DeviceBuffer send_gather, expert_gather, back_gather, route_row, route_weight;
  };
  // Count exchange, copy list and READY outputs (host planner; the gpu planner keeps its matrix
  // and copy list in its block).
  struct ReplicationBuffers {
    DeviceBuffer count_row, count_matrix, ops, slot_expert, fallback_slots;
    int32_t* matrix_host = nullptr;  // pinned [P][E]
  };
  // gpu planner only: the planner, its device block (PlanBlock) and the block's pinned mirror.
  struct GpuPlanState {
    std::unique_ptr<GpuPlanner> planner;
    PlanBlock block;
    DeviceBuffer words;
    int32_t* host = nullptr;

    int32_t* matrix() const { return words.get<int32_t>() + block.matrix_offset; }
    int32_t* plan() const { return words.get<int32_t>() + block.plan_offset; }
    CopyOp* ops() const {
      return reinterpret_cast<CopyOp*>(words.get<int32_t>() + block.ops_offset);
    }
    const int32_t* host_matrix() const { return host + block.matrix_offset; }
  };
  struct Events {
    Event start, shared_begin, shared_end, copy_begin, copy_end, gate_begin, gate_end, end,
        counts_ready, plan_begin, plan_ready, ops_uploaded;
  };
  struct TestHooks {
    std::function<void(Stream)> copy;            // fault injection: before each replicate
    std::function<void(Stream, int32_t*)> plan;  // fault injection: after the GPU plan
  };
  // What one invocation leaves behind.
  struct InvocationState {
    uint64_t epoch = 0;
    uint64_t generation = 0;
    bool pending = false;    // an invocation was enqueued (the next forward() waits for it)
    bool complete = false;   // ... and forward() returned normally (finish() may read it)
    bool bank_open = false;  // the replication of `generation` was enqueued, its release not yet
    bool balanced = false;
    bool gpu_planned = false;
    EpLayerTimings host_times;
  };

  LayerConfig config;
  Runtime* runtime = nullptr;
  ncclComm_t comm = nullptr;
  int rank = 0;
  EpLayerOptions options;
  std::unique_ptr<Policy> policy;
  cudaStream_t main = nullptr, copy = nullptr;
  cudaStream_t readback = nullptr;         // gpu planner: plan read-back beside the replication
  std::unique_ptr<GroupedMlp> mlp;         // H + S slots
  std::unique_ptr<GroupedMlp> shared_mlp;  // one slot over all local tokens
  std::unique_ptr<ExpertBank> shared;
  TokenBuffers tokens;
  RouteBuffers routes;
  ReplicationBuffers repl;
  GpuPlanState gpu;
  Events events;
  TestHooks hooks;
  InvocationState inv;

  ~Impl() {
    if (repl.matrix_host != nullptr) cudaFreeHost(repl.matrix_host);
    if (gpu.host != nullptr) cudaFreeHost(gpu.host);
    if (readback != nullptr) cudaStreamDestroy(readback);
    if (copy != nullptr) cudaStreamDestroy(copy);
    if (main != nullptr) cudaStreamDestroy(main);
  }
  int64_t max_rows() const {
    return int64_t{config.topo.num_ranks} * config.tokens_per_rank * config.top_k;
  }
  uint16_t* rows(DeviceBuffer& buf, int64_t row) const {
    return buf.get<uint16_t>() + row * config.shape.hidden;
  }
  void allocate_buffers();
  // gpu planner: the planner, its block, the read-back stream, and one plan to load the kernels.
  void set_up_gpu_planner(int stream_priority);

  // ---- the steps of one forward() ----
  // Validates the routes and counts this rank's routes per expert (its count row).
  std::vector<int32_t> count_routes(std::span<const int32_t> topk_ids,
                                    std::span<const float> topk_weights) const;
  // Waits for the previous invocation and releases a bank it left open; starts this one.
  void begin_invocation(bool balance);
  // COPY, right after routing: the count exchange (gpu planner: plan and replication right after
  // it). Returns where the host finds the exchanged matrix once `counts_ready` completed.
  const int32_t* enqueue_count_exchange(const std::vector<int32_t>& row);
  // MAIN: the shared expert, beside the count exchange and the planner.
  void enqueue_shared_expert(const void* input);
  // Host: waits for the exchanged counts and checks this rank's row in them.
  CountMatrix read_counts(const int32_t* matrix_host, const std::vector<int32_t>& row);
  // Host: the plan and its copy list (gpu planner: decodes and checks the device's plan; host
  // planner: plans with the policy and enqueues the replication).
  std::vector<CopyOp> make_plan(const CountMatrix& counts, bool balance, Plan& plan);
  // COPY (host planner): uploads the copy list and replicates the plan's experts.
  void enqueue_host_replication(const std::vector<CopyOp>& copy_ops);
  // MAIN: gathers the rows by destination and sends them to their slots' ranks.
  void dispatch(const void* input, std::span<const float> topk_weights, const RoutingMaps& maps);
  // MAIN: home-slot GEMMs; ON: READY gate, fallback refill, helper-slot GEMMs, bank release.
  void compute_experts(const RoutingMaps& maps, bool balance, const std::vector<CopyOp>& copy_ops);
  // MAIN: sends the expert outputs back and combines them with the shared expert's.
  void combine(const RoutingMaps& maps, void* output);

  void send_recv(const DeviceBuffer& from, const std::vector<int64_t>& from_off,
                 const std::vector<int64_t>& from_count, DeviceBuffer& to,
                 const std::vector<int64_t>& to_off, const std::vector<int64_t>& to_count);
  // MAIN, right after the READY gate: refills this rank's helper slots that the gate did not
  // validate from their experts' home bundles (owner's symmetric memory), counting them.
  void launch_fallback(const std::vector<CopyOp>& copy_ops);
  // gpu planner, COPY stream right after the count exchange into the block: plan, copy list,
  // `plan_ready`, then the replication; the read-back stream copies the block to the host
  // after `plan_ready` and records `counts_ready`.
  void enqueue_gpu_plan();
  // The plan -> copy-list kernel's params for the block's plan and ops.
  cuda::PlanCopyListParams copy_list_params() const;
  // gpu planner, host, after `counts_ready`: decodes and checks the plan the device replicated.
  // Returns false (logged; `plan` = no balancing, `ops` empty) when it cannot be used.
  bool accept_gpu_plan(const CountMatrix& counts, Plan& plan, std::vector<CopyOp>& copy_ops) const;
};

cuda::PlanCopyListParams EpMoeLayer::Impl::copy_list_params() const {
  cuda::PlanCopyListParams params;
  params.plan = gpu.plan();
  params.broadcasts_offset = gpu.planner->layout().broadcasts();
  params.max_ops = gpu.block.max_ops;
  params.num_ranks = config.topo.num_ranks;
  params.experts_per_rank = config.topo.experts_per_rank();
  params.num_slots = config.topo.num_slots;
  params.ops = gpu.ops();
  params.num_ops = gpu.words.get<int32_t>();
  return params;
}

void EpMoeLayer::Impl::enqueue_gpu_plan() {
  events.plan_begin.record(copy);
  gpu.planner->plan(gpu.matrix(), gpu.plan(), copy);
  if (hooks.plan) hooks.plan(copy, gpu.plan());
  cuda::launch_plan_copy_list(copy_list_params(), copy);
  events.plan_ready.record(copy);

  ISER_CUDA_CHECK(cudaStreamWaitEvent(readback, events.plan_ready.get()));
  ISER_CUDA_CHECK(cudaMemcpyAsync(gpu.host, gpu.words.get(),
                                  static_cast<size_t>(gpu.block.readback_words) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, readback));
  events.counts_ready.record(readback);

  // NOTE: max_ops, not the plan's B: the host does not know B yet; the entries past B are null
  // ops, which no rank writes (see PlanCopyListParams), and READY is published all the same.
  if (hooks.copy) hooks.copy(copy);
  ++inv.generation;
  events.copy_begin.record(copy);
  runtime->replicate(gpu.ops(), gpu.block.max_ops, 0, inv.generation, Transport::kPlan, copy);
  inv.bank_open = true;
  events.copy_end.record(copy);
}

bool EpMoeLayer::Impl::accept_gpu_plan(const CountMatrix& counts, Plan& plan,
                                       std::vector<CopyOp>& copy_ops) const {
  const GpuPlanLayout& layout = gpu.planner->layout();
  const std::span<const int32_t> words(gpu.host + gpu.block.plan_offset, layout.total_words());
  const auto status = static_cast<uint32_t>(words[GpuPlanLayout::kStatus]);
  std::string problem;
  if (status != kGpuOk) {
    problem = "planner status " + describe_gpu_status(status);
  } else {
    try {
      plan = plan_from_words(layout, words);
      const std::vector<std::string> issues =
          validate_plan(config.topo, counts, plan, policy->validation());
      if (!issues.empty()) {
        problem = "invalid plan: " + issues.front();
      } else {
        copy_ops = make_copy_list(plan);
        validate_copy_list(runtime->config(), copy_ops);
        const int32_t device_ops = gpu.host[0];
        const auto* device_list = reinterpret_cast<const CopyOp*>(gpu.host + gpu.block.ops_offset);
        if (device_ops != static_cast<int32_t>(copy_ops.size()) ||
            (!copy_ops.empty() &&
             std::memcmp(device_list, copy_ops.data(), copy_ops.size() * sizeof(CopyOp)) != 0)) {
          problem = fmt::format("the device copy list ({} ops) is not the plan's ({} ops)",
                                device_ops, copy_ops.size());
        }
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  if (problem.empty()) return true;
  std::fprintf(stderr, "iser: ep layer rank %d: GPU plan rejected (%s); invocation unbalanced\n",
               rank, problem.c_str());
  plan = make_empty_plan(config.topo, counts);
  copy_ops.clear();
  return false;
}

void EpMoeLayer::Impl::launch_fallback(const std::vector<CopyOp>& copy_ops) {
  const Topology& topo = config.topo;
  cuda::FallbackCopyParams params;
  params.slot_expert = repl.slot_expert.get<int32_t>();
  params.slot_base = rank * topo.num_slots;
  params.num_slots = topo.num_slots;
  params.bytes = config.shape.bundle_bytes();
  params.fallback_slots = repl.fallback_slots.get<uint32_t>();
  for (int h = 0; h < topo.num_slots; ++h) params.expert[h] = -1;
  // Symmetric layout: a home bundle sits at the same offset in every rank's region.
  const auto* local_base = static_cast<const char*>(runtime->peer_base(rank));
  const int bank = runtime->bank_of(inv.generation);
  bool any = false;
  for (const CopyOp& op : copy_ops) {
    if (rank < op.group_begin || rank >= op.group_begin + op.group_size) continue;
    const int home_idx = op.expert - topo.first_home_expert(op.owner);
    const auto* home = static_cast<const char*>(runtime->home_bundle(0, 0, home_idx));
    params.expert[op.helper] = op.expert;
    params.src[op.helper] =
        static_cast<const char*>(runtime->peer_base(op.owner)) + (home - local_base);
    params.dst[op.helper] = runtime->helper_slot(0, bank, op.helper);
    any = true;
  }
  if (any) cuda::launch_fallback_copy(params, main);
}
void EpMoeLayer::Impl::send_recv(const DeviceBuffer& from, const std::vector<int64_t>& from_off,
                                 const std::vector<int64_t>& from_count, DeviceBuffer& to,
                                 const std::vector<int64_t>& to_off,
                                 const std::vector<int64_t>& to_count) {
  const int64_t he = config.shape.hidden;
  ISER_NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < config.topo.num_ranks; ++peer) {
    if (from_count[peer] > 0) {
      ISER_NCCL_CHECK(ncclSend(from.get<uint16_t>() + from_off[peer] * he,
                               static_cast<size_t>(from_count[peer] * he), ncclBfloat16, peer, comm,
                               main));
    }
    if (to_count[peer] > 0) {
      ISER_NCCL_CHECK(ncclRecv(to.get<uint16_t>() + to_off[peer] * he,
                               static_cast<size_t>(to_count[peer] * he), ncclBfloat16, peer, comm,
                               main));
    }
  }
  ISER_NCCL_CHECK(ncclGroupEnd());
}

void EpMoeLayer::Impl::allocate_buffers() {
  const Topology& topo = config.topo;
  const int64_t rows = max_rows();
  const size_t row_bytes = static_cast<size_t>(config.shape.hidden) * 2;
  for (DeviceBuffer* buf : {&tokens.send_buf, &tokens.recv_buf, &tokens.x_expert, &tokens.y_expert,
                            &tokens.y_back, &tokens.comb_buf}) {
    *buf = DeviceBuffer(rows * row_bytes);
  }
  tokens.shared_out = DeviceBuffer(config.tokens_per_rank * row_bytes);
  for (DeviceBuffer* buf :
       {&routes.send_gather, &routes.expert_gather, &routes.back_gather, &routes.route_row}) {
    *buf = DeviceBuffer(rows * sizeof(int32_t));
  }
  routes.route_weight = DeviceBuffer(rows * sizeof(float));
  repl.count_row = DeviceBuffer(topo.num_experts * sizeof(int32_t));
  repl.count_matrix = DeviceBuffer(static_cast<size_t>(topo.num_ranks) * topo.num_experts * 4);
  repl.ops = DeviceBuffer(kMaxLocalCopyOps * sizeof(CopyOp));
  repl.slot_expert = DeviceBuffer(std::max(1, topo.num_ranks * topo.num_slots) * sizeof(int32_t));
  repl.fallback_slots = DeviceBuffer(sizeof(uint32_t));
  ISER_CUDA_CHECK(cudaMallocHost(&repl.matrix_host,
                                 static_cast<size_t>(topo.num_ranks) * topo.num_experts * 4));
}

void EpMoeLayer::Impl::set_up_gpu_planner(int stream_priority) {
  const Topology& topo = config.topo;
  // Refuses policies the GPU planner does not reproduce (iser::Error naming the policy).
  gpu.planner = std::make_unique<GpuPlanner>(topo, config.tokens_per_rank * config.top_k,
                                             gpu_planner_options(config.policy));
  gpu.block = PlanBlock::make(gpu.planner->layout());
  ISER_CHECK(gpu.block.max_ops <= kMaxLocalCopyOps,
             "ep layer: the GPU plan may hold {} broadcasts; the copy list holds at most {}",
             gpu.block.max_ops, kMaxLocalCopyOps);
  gpu.words = DeviceBuffer(static_cast<size_t>(gpu.block.total_words) * sizeof(int32_t));
  // On `copy`, the stream of the plan below: a cudaMemset (default stream) is not ordered before
  // a non-blocking stream's kernels.
  ISER_CUDA_CHECK(cudaMemsetAsync(gpu.words.get(), 0, gpu.words.bytes(), copy));
  ISER_CUDA_CHECK(cudaMallocHost(&gpu.host, gpu.words.bytes()));
  ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&readback, cudaStreamNonBlocking, stream_priority));
  // NOTE: one plan of the zeroed block (no broadcasts) loads the planner and copy-list kernels
  // now: with lazy module loading their first launch could otherwise wait for a stalled copy.
  gpu.planner->plan(gpu.matrix(), gpu.plan(), copy);
  cuda::launch_plan_copy_list(copy_list_params(), copy);
  ISER_CUDA_CHECK(cudaStreamSynchronize(copy));
}

EpMoeLayer::EpMoeLayer(const LayerConfig& config, Runtime& runtime, ncclComm* comm,
                       const EpLayerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const Topology& topo = config.topo;
  config.shape.check();
  ISER_CHECK(runtime.num_local_ranks() == 1 && !runtime.is_logical(),
             "ep layer: needs a one-rank-per-process runtime ({} local ranks)",
             runtime.num_local_ranks());
  check_ep_runtime_config(config, runtime.config(), "ep layer");
  ISER_CHECK(comm != nullptr, "ep layer: null NCCL communicator");
  s.config = config;
  s.runtime = &runtime;
  s.comm = comm;
  s.options = options;
  s.rank = runtime.first_rank();
  int least = 0, greatest = 0;
  ISER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&s.main, cudaStreamNonBlocking, least));
  ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&s.copy, cudaStreamNonBlocking, greatest));
  s.policy = make_policy(config.policy, topo);

  s.mlp = std::make_unique<GroupedMlp>(config.shape, topo.slots_per_rank(), s.max_rows());
  s.shared_mlp = std::make_unique<GroupedMlp>(config.shape, 1, config.tokens_per_rank);
  s.shared = std::make_unique<ExpertBank>(config.shape, 1);
  s.allocate_buffers();
  ISER_CHECK(topo.num_slots <= cuda::FallbackCopyConfig::kMaxSlots,
             "ep layer: S = {} helper slots; the READY fallback handles at most {}", topo.num_slots,
             cuda::FallbackCopyConfig::kMaxSlots);
  const bool use_gpu_planner =
      options.planner == PlannerKind::kGpu ||
      (options.planner == PlannerKind::kAuto &&
       gpu_planner_covers(config.policy, topo, int64_t{config.tokens_per_rank} * config.top_k));
  if (use_gpu_planner) s.set_up_gpu_planner(greatest);

  // Slot weights: home bundles and helper slots of the runtime's symmetric memory, the shared
  // expert in its own bank.
  s.mlp->set_weights(ep_slot_weights(config, runtime), s.main);
  s.shared_mlp->set_weights(std::vector<SlotWeights>{s.shared->slot(0)}, s.main);
  ISER_CUDA_CHECK(cudaStreamSynchronize(s.main));
}

EpMoeLayer::~EpMoeLayer() {
  if (impl_ && impl_->main != nullptr) cudaStreamSynchronize(impl_->main);
  if (impl_ && impl_->copy != nullptr) cudaStreamSynchronize(impl_->copy);
  if (impl_ && impl_->readback != nullptr) cudaStreamSynchronize(impl_->readback);
}

void EpMoeLayer::fill_weights(uint64_t seed, float scale) {
  Impl& s = *impl_;
  fill_ep_weights(s.config, *s.runtime, s.rank, *s.shared, seed, scale, s.main);
}

std::vector<int32_t> EpMoeLayer::Impl::count_routes(std::span<const int32_t> topk_ids,
                                                    std::span<const float> topk_weights) const {
  const int num_experts = config.topo.num_experts;
  const int top_k = config.top_k;
  const int64_t local_routes = int64_t{config.tokens_per_rank} * top_k;
  ISER_CHECK(static_cast<int64_t>(topk_ids.size()) == local_routes,
             "ep layer: topk_ids has {} entries, expected tau*k = {}", topk_ids.size(),
             local_routes);
  ISER_CHECK(static_cast<int64_t>(topk_weights.size()) == local_routes,
             "ep layer: topk_weights has {} entries, expected {}", topk_weights.size(),
             local_routes);
  std::vector<int32_t> row(num_experts, 0);
  for (int64_t i = 0; i < local_routes; ++i) {
    const int32_t e = topk_ids[i];
    ISER_CHECK(e >= -1 && e < num_experts,
               "ep layer: token {} choice {}: expert id {} outside "
               "[-1, {})",
               i / top_k, i % top_k, e, num_experts);
    if (e >= 0) ++row[e];
  }
  return row;
}

void EpMoeLayer::Impl::begin_invocation(bool balance) {
  // NOTE: invocations do not overlap: the previous one's buffers (maps, copy list, bank) are
  // free once its last MAIN event completed.
  if (inv.pending) {
    ISER_CUDA_CHECK(cudaStreamSynchronize(main));
    ISER_CUDA_CHECK(cudaStreamSynchronize(copy));  // the replicate kernel read the copy list
  }
  // NOTE: a generation is taken (++generation) only right before its replication is enqueued,
  // and every enqueued replication is followed by its bank release: here when the previous
  // forward() threw between the two, since otherwise every rank's next reuse fence would wait
  // for that release until it timed out.
  if (inv.bank_open) {
    runtime->release_bank(inv.generation, copy);
    inv.bank_open = false;
  }
  inv.pending = true;
  inv.complete = false;
  inv.balanced = balance;
  inv.gpu_planned = balance && gpu.planner != nullptr;
  inv.host_times = {};
}

const int32_t* EpMoeLayer::Impl::enqueue_count_exchange(const std::vector<int32_t>& row) {
  events.start.record(main);
  ISER_CUDA_CHECK(cudaStreamWaitEvent(copy, events.start.get()));
  ISER_CUDA_CHECK(cudaMemcpyAsync(repl.count_row.get(), row.data(), row.size() * 4,
                                  cudaMemcpyHostToDevice, copy));
  int32_t* device_matrix = inv.gpu_planned ? gpu.matrix() : repl.count_matrix.get<int32_t>();
  runtime->exchange_counts(repl.count_row.get<int32_t>(), device_matrix, ++inv.epoch, copy);
  if (inv.gpu_planned) {
    enqueue_gpu_plan();
    return gpu.host_matrix();
  }
  ISER_CUDA_CHECK(
      cudaMemcpyAsync(repl.matrix_host, repl.count_matrix.get(),
                      static_cast<size_t>(config.topo.num_ranks) * config.topo.num_experts * 4,
                      cudaMemcpyDeviceToHost, copy));
  events.counts_ready.record(copy);
  return repl.matrix_host;
}

void EpMoeLayer::Impl::enqueue_shared_expert(const void* input) {
  events.shared_begin.record(main);
  shared_mlp->run(input, std::vector<int32_t>{config.tokens_per_rank}, tokens.shared_out.get(),
                  main);
  events.shared_end.record(main);
  // gpu planner: the only wait on COPY before the READY gate is for the plan (its copy list
  // feeds the gate).
  if (inv.gpu_planned) ISER_CUDA_CHECK(cudaStreamWaitEvent(main, events.plan_ready.get()));
}

CountMatrix EpMoeLayer::Impl::read_counts(const int32_t* matrix_host,
                                          const std::vector<int32_t>& row) {
  const int num_ranks = config.topo.num_ranks;
  const int num_experts = config.topo.num_experts;
  const auto clock = std::chrono::steady_clock::now();
  ISER_CUDA_CHECK(cudaEventSynchronize(events.counts_ready.get()));
  inv.host_times.counts_wait_us = since_us(clock);
  CountMatrix counts(num_ranks, num_experts);
  std::copy(matrix_host, matrix_host + static_cast<size_t>(num_ranks) * num_experts,
            counts.data().begin());
  for (int e = 0; e < num_experts; ++e) {
    ISER_CHECK(counts.at(rank, e) == row[e],
               "ep layer: exchanged count row of rank {} differs at expert {} ({} != {})", rank, e,
               counts.at(rank, e), row[e]);
  }
  return counts;
}

std::vector<CopyOp> EpMoeLayer::Impl::make_plan(const CountMatrix& counts, bool balance,
                                                Plan& plan) {
  std::vector<CopyOp> copy_ops;
  if (inv.gpu_planned) {
    inv.host_times.plan_rejected = !accept_gpu_plan(counts, plan, copy_ops);
    return copy_ops;
  }
  plan = balance ? policy->plan(counts).plan : make_empty_plan(config.topo, counts);
  if (!balance) return copy_ops;
  check_plan(config.topo, counts, plan, policy->validation());
  copy_ops = make_copy_list(plan);
  validate_copy_list(runtime->config(), copy_ops);
  enqueue_host_replication(copy_ops);
  return copy_ops;
}

void EpMoeLayer::Impl::enqueue_host_replication(const std::vector<CopyOp>& copy_ops) {
  if (!copy_ops.empty()) {
    // On `copy`, the replication's stream: a cudaMemcpy (default stream) may return before its
    // DMA lands, and nothing would order the replicate kernel after it.
    ISER_CUDA_CHECK(cudaMemcpyAsync(repl.ops.get(), copy_ops.data(),
                                    copy_ops.size() * sizeof(CopyOp), cudaMemcpyHostToDevice,
                                    copy));
  }
  // NOTE: the READY gate on MAIN reads this list; without this event it could run before the
  // upload landed and validate the slots against the previous invocation's list.
  events.ops_uploaded.record(copy);
  if (hooks.copy) hooks.copy(copy);
  ++inv.generation;
  events.copy_begin.record(copy);
  runtime->replicate(repl.ops.get<CopyOp>(), static_cast<int>(copy_ops.size()), 0, inv.generation,
                     Transport::kPlan, copy);
  inv.bank_open = true;
  events.copy_end.record(copy);
}

void EpMoeLayer::Impl::dispatch(const void* input, std::span<const float> topk_weights,
                                const RoutingMaps& maps) {
  const auto upload = [&](DeviceBuffer& to, const void* from, size_t bytes) {
    if (bytes > 0) {
      ISER_CUDA_CHECK(cudaMemcpyAsync(to.get(), from, bytes, cudaMemcpyHostToDevice, main));
    }
  };
  upload(routes.send_gather, maps.send_gather.data(), maps.send_gather.size() * 4);
  upload(routes.expert_gather, maps.expert_gather.data(), maps.expert_gather.size() * 4);
  upload(routes.back_gather, maps.back_gather.data(), maps.back_gather.size() * 4);
  upload(routes.route_row, maps.route_row.data(), maps.route_row.size() * 4);
  upload(routes.route_weight, topk_weights.data(), topk_weights.size() * 4);
  const int hidden = config.shape.hidden;
  cuda::launch_gather_rows(
      {static_cast<const uint16_t*>(input), tokens.send_buf.get<uint16_t>(),
       routes.send_gather.get<int32_t>(), static_cast<int64_t>(maps.send_gather.size()), hidden},
      main);
  send_recv(tokens.send_buf, maps.send_off, maps.send_count, tokens.recv_buf, maps.recv_off,
            maps.recv_count);
  cuda::launch_gather_rows({tokens.recv_buf.get<uint16_t>(), tokens.x_expert.get<uint16_t>(),
                            routes.expert_gather.get<int32_t>(), maps.total_recv, hidden},
                           main);
}

void EpMoeLayer::Impl::compute_experts(const RoutingMaps& maps, bool balance,
                                       const std::vector<CopyOp>& copy_ops) {
  const int home = config.topo.experts_per_rank();
  const std::vector<int32_t>& rows_per_slot = maps.rows_per_slot;
  std::vector<int32_t> home_rows(rows_per_slot), helper_rows(rows_per_slot);
  std::fill(home_rows.begin() + home, home_rows.end(), 0);
  std::fill(helper_rows.begin(), helper_rows.begin() + home, 0);
  int64_t num_home_rows = 0;
  for (int l = 0; l < home; ++l) num_home_rows += rows_per_slot[l];
  mlp->run(tokens.x_expert.get(), home_rows, tokens.y_expert.get(), main);
  if (!balance) return;
  ISER_CUDA_CHECK(cudaMemsetAsync(repl.fallback_slots.get(), 0, sizeof(uint32_t), main));
  // gpu planner: MAIN waited for `plan_ready` (the device list) in enqueue_shared_expert.
  if (!inv.gpu_planned) ISER_CUDA_CHECK(cudaStreamWaitEvent(main, events.ops_uploaded.get()));
  events.gate_begin.record(main);
  // gpu planner: the device list's first copy_ops.size() entries are `copy_ops` (checked in
  // accept_gpu_plan); a rejected plan gates on none, so no route uses a helper slot.
  runtime->ready_gate(inv.gpu_planned ? gpu.ops() : repl.ops.get<CopyOp>(),
                      static_cast<int>(copy_ops.size()), inv.generation,
                      repl.slot_expert.get<int32_t>(), main);
  events.gate_end.record(main);
  launch_fallback(copy_ops);
  mlp->run(rows(tokens.x_expert, num_home_rows), helper_rows, rows(tokens.y_expert, num_home_rows),
           main);
  runtime->release_bank(inv.generation, main);
  inv.bank_open = false;
}

void EpMoeLayer::Impl::combine(const RoutingMaps& maps, void* output) {
  const int hidden = config.shape.hidden;
  cuda::launch_gather_rows({tokens.y_expert.get<uint16_t>(), tokens.y_back.get<uint16_t>(),
                            routes.back_gather.get<int32_t>(), maps.total_recv, hidden},
                           main);
  send_recv(tokens.y_back, maps.recv_off, maps.recv_count, tokens.comb_buf, maps.send_off,
            maps.send_count);
  cuda::launch_combine(
      {tokens.comb_buf.get<uint16_t>(), routes.route_row.get<int32_t>(),
       routes.route_weight.get<float>(), tokens.shared_out.get<uint16_t>(),
       static_cast<uint16_t*>(output), config.tokens_per_rank, config.top_k, hidden},
      main);
}

LayerInvocationStats EpMoeLayer::forward(const void* input, std::span<const int32_t> topk_ids,
                                         std::span<const float> topk_weights, bool balance,
                                         void* output) {
  Impl& s = *impl_;
  const Topology& topo = s.config.topo;
  const std::vector<int32_t> row = s.count_routes(topk_ids, topk_weights);
  s.begin_invocation(balance);
  const int32_t* matrix_host = s.enqueue_count_exchange(row);
  s.enqueue_shared_expert(input);

  const CountMatrix counts = s.read_counts(matrix_host, row);
  const auto clock = std::chrono::steady_clock::now();
  LayerInvocationStats stats;
  const std::vector<CopyOp> ops = s.make_plan(counts, balance, stats.plan);
  for (const CopyOp& op : ops) {
    const bool owner_inside =
        op.owner >= op.group_begin && op.owner < op.group_begin + op.group_size;
    stats.remote_copies += op.group_size - (owner_inside ? 1 : 0);
  }
  // Host: routing maps (who sends what where, in which slot order).
  const RoutingMaps maps =
      build_routing_maps(topo, counts, stats.plan, s.rank, topk_ids, s.config.top_k);
  stats.rank_loads.assign(topo.num_ranks, 0);
  stats.rank_loads[s.rank] = maps.total_recv;
  for (int l = topo.experts_per_rank(); l < topo.slots_per_rank(); ++l) {
    stats.helper_routes += maps.rows_per_slot[l];
  }
  s.inv.host_times.plan_us = since_us(clock);

  // MAIN: dispatch, expert compute (helper slots behind the READY gate), combine.
  s.dispatch(input, topk_weights, maps);
  s.compute_experts(maps, balance, ops);
  s.combine(maps, output);
  s.events.end.record(s.main);
  s.inv.complete = true;
  return stats;
}

PlannerKind EpMoeLayer::planner() const {
  return impl_->gpu.planner != nullptr ? PlannerKind::kGpu : PlannerKind::kHost;
}

void EpMoeLayer::set_plan_hook(std::function<void(Stream, int32_t*)> hook) {
  impl_->hooks.plan = std::move(hook);
}

void EpMoeLayer::set_copy_hook(std::function<void(Stream)> hook) {
  impl_->hooks.copy = std::move(hook);
}

EpLayerTimings EpMoeLayer::finish() {
  Impl& s = *impl_;
  ISER_CHECK(s.inv.pending, "ep layer: finish() without a forward()");
  ISER_CHECK(s.inv.complete, "ep layer: finish() after a forward() that threw");
  ISER_CUDA_CHECK(cudaEventSynchronize(s.events.end.get()));
  ISER_CUDA_CHECK(cudaStreamSynchronize(s.copy));
  EpLayerTimings t = s.inv.host_times;
  if (s.inv.balanced) {
    ISER_CUDA_CHECK(cudaMemcpy(&t.fallback_slots, s.repl.fallback_slots.get(), sizeof(uint32_t),
                               cudaMemcpyDeviceToHost));
  }
  // A READY failure (a writer timed out, failed or ran too late) was handled on the device: the
  // slots it left without a valid replica were refilled from home bundles before the helper
  // GEMMs. It is logged and cleared; any other failure (count exchange, reuse fence) throws.
  const RuntimeStatus status = s.runtime->status(0);
  const bool ready_failure = status.code == StatusCode::kReadyTimeout ||
                             status.code == StatusCode::kCopyFailed ||
                             status.code == StatusCode::kReadyOvertaken;
  if (ready_failure && s.inv.balanced) {
    std::fprintf(stderr,
                 "iser: ep layer rank %d: %s; %u helper slot(s) recomputed from home bundles\n",
                 s.rank, status.message().c_str(), t.fallback_slots);
    s.runtime->clear_status(s.main);  // before the next invocation's work (it starts on MAIN)
  } else {
    s.runtime->check_status();
  }
  t.layer_ms = elapsed_ms(s.events.start, s.events.end);
  t.shared_ms = elapsed_ms(s.events.shared_begin, s.events.shared_end);
  if (s.inv.balanced) {
    t.copy_ms = elapsed_ms(s.events.copy_begin, s.events.copy_end);
    t.ready_wait_ms = elapsed_ms(s.events.gate_begin, s.events.gate_end);
  }
  if (s.inv.gpu_planned) t.gpu_plan_ms = elapsed_ms(s.events.plan_begin, s.events.plan_ready);
  return t;
}

}  // namespace iser::moe
