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

#include "cuda/moe_kernels.h"
#include "iser/counts.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/moe_ep_layer.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/validator.h"
#include "moe/device_buffer.h"
#include "moe/routing_maps.h"

namespace iser::moe {
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

struct EpMoeLayer::Impl {
  LayerConfig config;
  Runtime* runtime = nullptr;
  ncclComm_t comm = nullptr;
  int rank = 0;
  EpLayerOptions options;
  cudaStream_t main = nullptr, copy = nullptr;
  cudaStream_t readback = nullptr;  // gpu planner: plan read-back beside the replication
  std::unique_ptr<Policy> policy;
  std::unique_ptr<GroupedMlp> mlp;         // H + S slots
  std::unique_ptr<GroupedMlp> shared_mlp;  // one slot over all local tokens
  std::unique_ptr<ExpertBank> shared;
  DeviceBuffer send_buf, recv_buf, x_expert, y_expert, y_back, comb_buf, shared_out;
  DeviceBuffer send_gather, expert_gather, back_gather, route_row, route_weight;
  DeviceBuffer count_row, count_matrix, ops, slot_expert, fallback_slots;
  std::function<void(Stream)> copy_hook;  // fault injection (tests): before each replicate
  std::function<void(Stream, int32_t*)> plan_hook;  // fault injection (tests): after the plan
  int32_t* matrix_host = nullptr;                   // pinned [P][E]
  // gpu planner only: the planner, its device block (PlanBlock) and the block's pinned mirror.
  std::unique_ptr<GpuPlanner> gpu_planner;
  PlanBlock block;
  DeviceBuffer plan_block;
  int32_t* block_host = nullptr;
  Event start, shared_begin, shared_end, copy_begin, copy_end, gate_begin, gate_end, end,
      counts_ready, plan_begin, plan_ready, ops_uploaded;
  uint64_t epoch = 0;
  uint64_t generation = 0;
  bool pending = false;    // an invocation was enqueued (the next forward() waits for it)
  bool complete = false;   // ... and forward() returned normally (finish() may read it)
  bool bank_open = false;  // the replication of `generation` was enqueued, its release not yet
  bool last_balanced = false;
  bool last_gpu_planned = false;
  EpLayerTimings host_times;

  ~Impl() {
    if (matrix_host != nullptr) cudaFreeHost(matrix_host);
    if (block_host != nullptr) cudaFreeHost(block_host);
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
  int32_t* block_words() const { return plan_block.get<int32_t>(); }
  CopyOp* block_ops() const { return reinterpret_cast<CopyOp*>(block_words() + block.ops_offset); }
};

cuda::PlanCopyListParams EpMoeLayer::Impl::copy_list_params() const {
  cuda::PlanCopyListParams params;
  params.plan = block_words() + block.plan_offset;
  params.broadcasts_offset = gpu_planner->layout().broadcasts();
  params.max_ops = block.max_ops;
  params.num_ranks = config.topo.num_ranks;
  params.experts_per_rank = config.topo.experts_per_rank();
  params.num_slots = config.topo.num_slots;
  params.ops = block_ops();
  params.num_ops = block_words();
  return params;
}

void EpMoeLayer::Impl::enqueue_gpu_plan() {
  plan_begin.record(copy);
  gpu_planner->plan(block_words() + block.matrix_offset, block_words() + block.plan_offset, copy);
  if (plan_hook) plan_hook(copy, block_words() + block.plan_offset);
  cuda::launch_plan_copy_list(copy_list_params(), copy);
  plan_ready.record(copy);

  ISER_CUDA_CHECK(cudaStreamWaitEvent(readback, plan_ready.get()));
  ISER_CUDA_CHECK(cudaMemcpyAsync(block_host, block_words(),
                                  static_cast<size_t>(block.readback_words) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, readback));
  counts_ready.record(readback);

  // NOTE: max_ops, not the plan's B: the host does not know B yet; the entries past B are null
  // ops, which no rank writes (see PlanCopyListParams), and READY is published all the same.
  if (copy_hook) copy_hook(copy);
  ++generation;
  copy_begin.record(copy);
  runtime->replicate(block_ops(), block.max_ops, 0, generation, Transport::kPlan, copy);
  bank_open = true;
  copy_end.record(copy);
}

bool EpMoeLayer::Impl::accept_gpu_plan(const CountMatrix& counts, Plan& plan,
                                       std::vector<CopyOp>& copy_ops) const {
  const GpuPlanLayout& layout = gpu_planner->layout();
  const std::span<const int32_t> words(block_host + block.plan_offset, layout.total_words());
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
        const int32_t device_ops = block_host[0];
        const auto* device_list = reinterpret_cast<const CopyOp*>(block_host + block.ops_offset);
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
  params.slot_expert = slot_expert.get<int32_t>();
  params.slot_base = rank * topo.num_slots;
  params.num_slots = topo.num_slots;
  params.bytes = config.shape.bundle_bytes();
  params.fallback_slots = fallback_slots.get<uint32_t>();
  for (int h = 0; h < topo.num_slots; ++h) params.expert[h] = -1;
  // Symmetric layout: a home bundle sits at the same offset in every rank's region.
  const auto* local_base = static_cast<const char*>(runtime->peer_base(rank));
  const int bank = runtime->bank_of(generation);
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

  const int64_t rows = s.max_rows();
  const size_t row_bytes = static_cast<size_t>(config.shape.hidden) * 2;
  s.mlp = std::make_unique<GroupedMlp>(config.shape, topo.slots_per_rank(), rows);
  s.shared_mlp = std::make_unique<GroupedMlp>(config.shape, 1, config.tokens_per_rank);
  s.shared = std::make_unique<ExpertBank>(config.shape, 1);
  for (DeviceBuffer* buf :
       {&s.send_buf, &s.recv_buf, &s.x_expert, &s.y_expert, &s.y_back, &s.comb_buf}) {
    *buf = DeviceBuffer(rows * row_bytes);
  }
  s.shared_out = DeviceBuffer(config.tokens_per_rank * row_bytes);
  for (DeviceBuffer* buf : {&s.send_gather, &s.expert_gather, &s.back_gather, &s.route_row}) {
    *buf = DeviceBuffer(rows * sizeof(int32_t));
  }
  s.route_weight = DeviceBuffer(rows * sizeof(float));
  s.count_row = DeviceBuffer(topo.num_experts * sizeof(int32_t));
  s.count_matrix = DeviceBuffer(static_cast<size_t>(topo.num_ranks) * topo.num_experts * 4);
  s.ops = DeviceBuffer(kMaxLocalCopyOps * sizeof(CopyOp));
  s.slot_expert = DeviceBuffer(std::max(1, topo.num_ranks * topo.num_slots) * sizeof(int32_t));
  s.fallback_slots = DeviceBuffer(sizeof(uint32_t));
  ISER_CHECK(topo.num_slots <= cuda::FallbackCopyConfig::kMaxSlots,
             "ep layer: S = {} helper slots; the READY fallback handles at most {}", topo.num_slots,
             cuda::FallbackCopyConfig::kMaxSlots);
  ISER_CUDA_CHECK(
      cudaMallocHost(&s.matrix_host, static_cast<size_t>(topo.num_ranks) * topo.num_experts * 4));
  const bool use_gpu_planner =
      options.planner == PlannerKind::kGpu ||
      (options.planner == PlannerKind::kAuto &&
       gpu_planner_covers(config.policy, topo, int64_t{config.tokens_per_rank} * config.top_k));
  if (use_gpu_planner) {
    // Refuses policies the GPU planner does not reproduce (iser::Error naming the policy).
    s.gpu_planner = std::make_unique<GpuPlanner>(topo, config.tokens_per_rank * config.top_k,
                                                 gpu_planner_options(config.policy));
    s.block = PlanBlock::make(s.gpu_planner->layout());
    ISER_CHECK(s.block.max_ops <= kMaxLocalCopyOps,
               "ep layer: the GPU plan may hold {} broadcasts; the copy list holds at most {}",
               s.block.max_ops, kMaxLocalCopyOps);
    s.plan_block = DeviceBuffer(static_cast<size_t>(s.block.total_words) * sizeof(int32_t));
    // On s.copy, the stream of the plan below: a cudaMemset (default stream) is not ordered
    // before a non-blocking stream's kernels.
    ISER_CUDA_CHECK(cudaMemsetAsync(s.plan_block.get(), 0, s.plan_block.bytes(), s.copy));
    ISER_CUDA_CHECK(cudaMallocHost(&s.block_host, s.plan_block.bytes()));
    ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&s.readback, cudaStreamNonBlocking, greatest));
    // NOTE: one plan of the zeroed block (no broadcasts) loads the planner and copy-list kernels
    // now: with lazy module loading their first launch could otherwise wait for a stalled copy.
    s.gpu_planner->plan(s.block_words() + s.block.matrix_offset,
                        s.block_words() + s.block.plan_offset, s.copy);
    cuda::launch_plan_copy_list(s.copy_list_params(), s.copy);
    ISER_CUDA_CHECK(cudaStreamSynchronize(s.copy));
  }

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

LayerInvocationStats EpMoeLayer::forward(const void* input, std::span<const int32_t> topk_ids,
                                         std::span<const float> topk_weights, bool balance,
                                         void* output) {
  Impl& s = *impl_;
  const Topology& topo = s.config.topo;
  const int num_ranks = topo.num_ranks;
  const int num_experts = topo.num_experts;
  const int tau = s.config.tokens_per_rank;
  const int top_k = s.config.top_k;
  const int home = topo.experts_per_rank();
  const int per_rank = topo.slots_per_rank();
  const int64_t local_routes = int64_t{tau} * top_k;
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
  // NOTE: invocations do not overlap: the previous one's buffers (maps, copy list, bank) are
  // free once its last MAIN event completed.
  if (s.pending) {
    ISER_CUDA_CHECK(cudaStreamSynchronize(s.main));
    ISER_CUDA_CHECK(cudaStreamSynchronize(s.copy));  // the replicate kernel read the copy list
  }
  // NOTE: a generation is taken (++generation) only right before its replication is enqueued,
  // and every enqueued replication is followed by its bank release: here when the previous
  // forward() threw between the two, since otherwise every rank's next reuse fence would wait
  // for that release until it timed out.
  if (s.bank_open) {
    s.runtime->release_bank(s.generation, s.copy);
    s.bank_open = false;
  }
  const bool gpu_planned = balance && s.gpu_planner != nullptr;
  s.pending = true;
  s.complete = false;
  s.last_balanced = balance;
  s.last_gpu_planned = gpu_planned;
  s.host_times = {};

  // COPY: count exchange right after routing; gpu planner: plan and replication right after it.
  s.start.record(s.main);
  ISER_CUDA_CHECK(cudaStreamWaitEvent(s.copy, s.start.get()));
  ISER_CUDA_CHECK(cudaMemcpyAsync(s.count_row.get(), row.data(), row.size() * 4,
                                  cudaMemcpyHostToDevice, s.copy));
  int32_t* device_matrix =
      gpu_planned ? s.block_words() + s.block.matrix_offset : s.count_matrix.get<int32_t>();
  s.runtime->exchange_counts(s.count_row.get<int32_t>(), device_matrix, ++s.epoch, s.copy);
  const int32_t* matrix_host = s.matrix_host;
  if (gpu_planned) {
    s.enqueue_gpu_plan();
    matrix_host = s.block_host + s.block.matrix_offset;
  } else {
    ISER_CUDA_CHECK(cudaMemcpyAsync(s.matrix_host, s.count_matrix.get(),
                                    static_cast<size_t>(num_ranks) * num_experts * 4,
                                    cudaMemcpyDeviceToHost, s.copy));
    s.counts_ready.record(s.copy);
  }

  // MAIN: the shared expert, beside the count exchange and the planner. gpu planner: the only
  // wait on COPY before the READY gate is for the plan (its copy list feeds the gate).
  s.shared_begin.record(s.main);
  s.shared_mlp->run(input, std::vector<int32_t>{tau}, s.shared_out.get(), s.main);
  s.shared_end.record(s.main);
  if (gpu_planned) ISER_CUDA_CHECK(cudaStreamWaitEvent(s.main, s.plan_ready.get()));

  // Host: plan from the exchanged counts (gpu planner: decode the device's plan).
  auto clock = std::chrono::steady_clock::now();
  ISER_CUDA_CHECK(cudaEventSynchronize(s.counts_ready.get()));
  s.host_times.counts_wait_us = since_us(clock);
  clock = std::chrono::steady_clock::now();
  CountMatrix counts(num_ranks, num_experts);
  std::copy(matrix_host, matrix_host + static_cast<size_t>(num_ranks) * num_experts,
            counts.data().begin());
  for (int e = 0; e < num_experts; ++e) {
    ISER_CHECK(counts.at(s.rank, e) == row[e],
               "ep layer: exchanged count row of rank {} differs at expert {} ({} != {})", s.rank,
               e, counts.at(s.rank, e), row[e]);
  }
  LayerInvocationStats stats;
  std::vector<CopyOp> ops;
  if (gpu_planned) {
    s.host_times.plan_rejected = !s.accept_gpu_plan(counts, stats.plan, ops);
  } else {
    stats.plan = balance ? s.policy->plan(counts).plan : make_empty_plan(topo, counts);
    if (balance) check_plan(topo, counts, stats.plan, s.policy->validation());
  }

  // COPY (host planner): replication of the plan's experts into the groups' helper slots.
  if (balance && !gpu_planned) {
    ops = make_copy_list(stats.plan);
    validate_copy_list(s.runtime->config(), ops);
    if (!ops.empty()) {
      // On s.copy, the replication's stream: a cudaMemcpy (default stream) may return before its
      // DMA lands, and nothing would order the replicate kernel after it.
      ISER_CUDA_CHECK(cudaMemcpyAsync(s.ops.get(), ops.data(), ops.size() * sizeof(CopyOp),
                                      cudaMemcpyHostToDevice, s.copy));
    }
    // NOTE: the READY gate on MAIN reads this list; without this event it could run before the
    // upload landed and validate the slots against the previous invocation's list.
    s.ops_uploaded.record(s.copy);
    if (s.copy_hook) s.copy_hook(s.copy);
    ++s.generation;
    s.copy_begin.record(s.copy);
    s.runtime->replicate(s.ops.get<CopyOp>(), static_cast<int>(ops.size()), 0, s.generation,
                         Transport::kPlan, s.copy);
    s.bank_open = true;
    s.copy_end.record(s.copy);
  }
  for (const CopyOp& op : ops) {
    const bool owner_inside =
        op.owner >= op.group_begin && op.owner < op.group_begin + op.group_size;
    stats.remote_copies += op.group_size - (owner_inside ? 1 : 0);
  }

  // Host: routing maps (who sends what where, in which slot order).
  const RoutingMaps maps = build_routing_maps(topo, counts, stats.plan, s.rank, topk_ids, top_k);
  const std::vector<int32_t>& rows_per_slot = maps.rows_per_slot;
  const int64_t total_recv = maps.total_recv;
  stats.rank_loads.assign(num_ranks, 0);
  stats.rank_loads[s.rank] = total_recv;
  for (int l = home; l < per_rank; ++l) stats.helper_routes += rows_per_slot[l];
  s.host_times.plan_us = since_us(clock);

  // MAIN: dispatch, expert compute (helper slots behind the READY gate), combine.
  const auto upload = [&](DeviceBuffer& to, const void* from, size_t bytes) {
    if (bytes > 0) {
      ISER_CUDA_CHECK(cudaMemcpyAsync(to.get(), from, bytes, cudaMemcpyHostToDevice, s.main));
    }
  };
  upload(s.send_gather, maps.send_gather.data(), maps.send_gather.size() * 4);
  upload(s.expert_gather, maps.expert_gather.data(), maps.expert_gather.size() * 4);
  upload(s.back_gather, maps.back_gather.data(), maps.back_gather.size() * 4);
  upload(s.route_row, maps.route_row.data(), maps.route_row.size() * 4);
  upload(s.route_weight, topk_weights.data(), topk_weights.size() * 4);
  const int hidden = s.config.shape.hidden;
  cuda::launch_gather_rows(
      {static_cast<const uint16_t*>(input), s.send_buf.get<uint16_t>(),
       s.send_gather.get<int32_t>(), static_cast<int64_t>(maps.send_gather.size()), hidden},
      s.main);
  s.send_recv(s.send_buf, maps.send_off, maps.send_count, s.recv_buf, maps.recv_off,
              maps.recv_count);
  cuda::launch_gather_rows({s.recv_buf.get<uint16_t>(), s.x_expert.get<uint16_t>(),
                            s.expert_gather.get<int32_t>(), total_recv, hidden},
                           s.main);
  std::vector<int32_t> home_rows(rows_per_slot), helper_rows(rows_per_slot);
  std::fill(home_rows.begin() + home, home_rows.end(), 0);
  std::fill(helper_rows.begin(), helper_rows.begin() + home, 0);
  int64_t num_home_rows = 0;
  for (int l = 0; l < home; ++l) num_home_rows += rows_per_slot[l];
  s.mlp->run(s.x_expert.get(), home_rows, s.y_expert.get(), s.main);
  if (balance) {
    ISER_CUDA_CHECK(cudaMemsetAsync(s.fallback_slots.get(), 0, sizeof(uint32_t), s.main));
    // gpu planner: MAIN waited for `plan_ready` (the device list) above.
    if (!gpu_planned) ISER_CUDA_CHECK(cudaStreamWaitEvent(s.main, s.ops_uploaded.get()));
    s.gate_begin.record(s.main);
    // gpu planner: the device list's first ops.size() entries are `ops` (checked above); a
    // rejected plan gates on none, so no route uses a helper slot.
    s.runtime->ready_gate(gpu_planned ? s.block_ops() : s.ops.get<CopyOp>(),
                          static_cast<int>(ops.size()), s.generation, s.slot_expert.get<int32_t>(),
                          s.main);
    s.gate_end.record(s.main);
    s.launch_fallback(ops);
    s.mlp->run(s.rows(s.x_expert, num_home_rows), helper_rows, s.rows(s.y_expert, num_home_rows),
               s.main);
    s.runtime->release_bank(s.generation, s.main);
    s.bank_open = false;
  }
  cuda::launch_gather_rows({s.y_expert.get<uint16_t>(), s.y_back.get<uint16_t>(),
                            s.back_gather.get<int32_t>(), total_recv, hidden},
                           s.main);
  s.send_recv(s.y_back, maps.recv_off, maps.recv_count, s.comb_buf, maps.send_off, maps.send_count);
  cuda::launch_combine(
      {s.comb_buf.get<uint16_t>(), s.route_row.get<int32_t>(), s.route_weight.get<float>(),
       s.shared_out.get<uint16_t>(), static_cast<uint16_t*>(output), tau, top_k, hidden},
      s.main);
  s.end.record(s.main);
  s.complete = true;
  return stats;
}

PlannerKind EpMoeLayer::planner() const {
  return impl_->gpu_planner != nullptr ? PlannerKind::kGpu : PlannerKind::kHost;
}

void EpMoeLayer::set_plan_hook(std::function<void(Stream, int32_t*)> hook) {
  impl_->plan_hook = std::move(hook);
}

void EpMoeLayer::set_copy_hook(std::function<void(Stream)> hook) {
  impl_->copy_hook = std::move(hook);
}

EpLayerTimings EpMoeLayer::finish() {
  Impl& s = *impl_;
  ISER_CHECK(s.pending, "ep layer: finish() without a forward()");
  ISER_CHECK(s.complete, "ep layer: finish() after a forward() that threw");
  ISER_CUDA_CHECK(cudaEventSynchronize(s.end.get()));
  ISER_CUDA_CHECK(cudaStreamSynchronize(s.copy));
  EpLayerTimings t = s.host_times;
  if (s.last_balanced) {
    ISER_CUDA_CHECK(cudaMemcpy(&t.fallback_slots, s.fallback_slots.get(), sizeof(uint32_t),
                               cudaMemcpyDeviceToHost));
  }
  // A READY failure (a writer timed out, failed or ran too late) was handled on the device: the
  // slots it left without a valid replica were refilled from home bundles before the helper
  // GEMMs. It is logged and cleared; any other failure (count exchange, reuse fence) throws.
  const RuntimeStatus status = s.runtime->status(0);
  const bool ready_failure = status.code == StatusCode::kReadyTimeout ||
                             status.code == StatusCode::kCopyFailed ||
                             status.code == StatusCode::kReadyOvertaken;
  if (ready_failure && s.last_balanced) {
    std::fprintf(stderr,
                 "iser: ep layer rank %d: %s; %u helper slot(s) recomputed from home bundles\n",
                 s.rank, status.message().c_str(), t.fallback_slots);
    s.runtime->clear_status(s.main);  // before the next invocation's work (it starts on MAIN)
  } else {
    s.runtime->check_status();
  }
  t.layer_ms = elapsed_ms(s.start, s.end);
  t.shared_ms = elapsed_ms(s.shared_begin, s.shared_end);
  if (s.last_balanced) {
    t.copy_ms = elapsed_ms(s.copy_begin, s.copy_end);
    t.ready_wait_ms = elapsed_ms(s.gate_begin, s.gate_end);
  }
  if (s.last_gpu_planned) t.gpu_plan_ms = elapsed_ms(s.plan_begin, s.plan_ready);
  return t;
}

}  // namespace iser::moe
