// Static-shape graph mode of the EP MoE layer (include/iser/moe_ep_graph.h).
//
// One invocation on rank r (docs/moe.md draws it):
//   COPY (highest priority)  count -> count exchange -> GPU plan + route rewrite (one kernel)
//                            -> copy list
//                            -> `plan_ready` -> replicate -> READY gate -> `gate_done`
//   MAIN (low priority)      shared expert -> wait(plan_ready) -> dispatch (positions, headers)
//                            -> send gather -> fixed NCCL send/recv -> receive maps -> scatter into
//                            [L][C] slots -> home-slot GEMMs (M = C) -> wait(gate_done) -> refill
//                            -> helper-slot GEMMs -> bank release -> gather back -> fixed NCCL
//                            send/recv back -> combine
// NOTE: the READY gate runs on COPY right after the replication, not on MAIN as in EpMoeLayer:
// with device-side generations (kDeviceGeneration, what makes the graph replayable) the gate and
// the bank release take the generation from the rank's counter, which the replicate kernel
// advances when it finishes; on COPY the gate runs after it by stream order, and the release
// runs on MAIN after `gate_done`. MAIN still waits for nothing on COPY before the plan, and for
// the copy only where the helper GEMMs need it; every wait on COPY is bounded (the runtime's
// device-side timeouts), a failed or late copy ends in the refill.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/moe_graph_kernels.h"
#include "cuda/moe_kernels.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/moe_ep_graph.h"
#include "iser/moe_ep_layer.h"
#include "moe/order_event.h"

namespace iser::moe {

using cuda::DeviceBuffer;
namespace {

std::string describe_graph_errors(uint32_t bits) {
  std::string out;
  const auto add = [&](uint32_t bit, const char* name) {
    if ((bits & bit) == 0) return;
    if (!out.empty()) out += "|";
    out += name;
  };
  add(cuda::kGraphBadExpertId, "expert id outside [-1, E)");
  add(cuda::kGraphSlotOverflow, "a slot received more than C rows (repeated expert in a token?)");
  add(cuda::kGraphBadHeader, "a block header claims more than tau * k rows");
  return out;
}

}  // namespace

GraphDims graph_dims(const LayerConfig& config, bool balance) {
  const Topology& topo = config.topo;
  config.shape.check();
  const int tau = config.tokens_per_rank;
  ISER_CHECK(tau >= 1, "ep graph layer: tokens_per_rank = {} must be >= 1", tau);
  ISER_CHECK(config.top_k >= 1 && config.top_k <= topo.num_experts,
             "ep graph layer: top_k = {} outside [1, E = {}]", config.top_k, topo.num_experts);
  const int64_t slot_rows = int64_t{tau} * topo.num_ranks;
  ISER_CHECK(slot_rows <= kGraphMaxSlotRows,
             "ep graph layer: tokens_per_rank = {}: slot capacity C = tokens_per_rank x P = {} "
             "exceeds kGraphMaxSlotRows = {} (fixed-M GEMMs would be compute-bound; use "
             "EpMoeLayer)",
             tau, slot_rows, kGraphMaxSlotRows);
  ISER_CHECK(topo.num_ranks <= cuda::GraphFallbackConfig::kMaxRanks,
             "ep graph layer: num_ranks = {} exceeds {}", topo.num_ranks,
             cuda::GraphFallbackConfig::kMaxRanks);
  ISER_CHECK(topo.num_slots <= cuda::GraphFallbackConfig::kMaxSlots,
             "ep graph layer: num_slots = {} exceeds {}", topo.num_slots,
             cuda::GraphFallbackConfig::kMaxSlots);
  const int64_t routes = int64_t{tau} * config.top_k;
  ISER_CHECK(!balance || gpu_planner_covers(config.policy, topo, routes),
             "ep graph layer: policy '{}' (P {}, E {}, S {}, tau * k = {}) is not covered by the "
             "GPU planner (gpu_planner_covers: the HALO-Q family, P <= {}, E <= {}, S <= {})",
             config.policy, topo.num_ranks, topo.num_experts, topo.num_slots, routes, kGpuMaxRanks,
             kGpuMaxExperts, kGpuMaxSlots);
  GraphDims dims;
  dims.num_ranks = topo.num_ranks;
  dims.experts_per_rank = topo.experts_per_rank();
  dims.slots_per_rank = topo.slots_per_rank();
  dims.num_tokens = tau;
  dims.top_k = config.top_k;
  dims.hidden = config.shape.hidden;
  dims.peer_rows = static_cast<int>(routes);
  const int64_t header_bytes = int64_t{4} * dims.slots_per_rank;
  const int64_t row_bytes = int64_t{2} * dims.hidden;
  dims.header_rows = static_cast<int>((header_bytes + row_bytes - 1) / row_bytes);
  dims.slot_rows = static_cast<int>(slot_rows);
  const int dispatch_smem = cuda::GraphDispatchConfig::smem_bytes(dims);
  ISER_CHECK(dispatch_smem <= cuda::GraphDispatchConfig::kMaxSmemBytes,
             "ep graph layer: the dispatch table (P (H + S) = {} slots, tau * k = {} routes) "
             "takes {} bytes of shared memory, more than {}",
             dims.total_slots(), routes, dispatch_smem, cuda::GraphDispatchConfig::kMaxSmemBytes);
  const int receive_smem = cuda::GraphReceiveConfig::smem_bytes(dims);
  ISER_CHECK(receive_smem <= cuda::GraphDispatchConfig::kMaxSmemBytes,
             "ep graph layer: the receive table (P (H + S) = {} slots) takes {} bytes of shared "
             "memory, more than {}",
             dims.total_slots(), receive_smem, cuda::GraphDispatchConfig::kMaxSmemBytes);
  return dims;
}

struct GraphEpMoeLayer::Impl {
  LayerConfig config;
  GraphDims dims;
  GraphLayerOptions options;
  Runtime* runtime = nullptr;
  ncclComm_t comm = nullptr;
  int rank = 0;
  cudaStream_t main = nullptr, copy = nullptr;
  std::unique_ptr<GroupedMlp> mlp;         // H + S slots of C rows
  std::unique_ptr<GroupedMlp> shared_mlp;  // one slot over the tau local tokens
  std::unique_ptr<ExpertBank> shared;
  std::unique_ptr<GpuPlanner> planner;  // ON only
  int max_ops = 0;
  // Static inputs and outputs (the graph holds their addresses).
  DeviceBuffer input, ids, weights, output;
  // Activations: shared expert out, exchange blocks, slot buffers, returned rows.
  DeviceBuffer shared_out, send, recv, x_expert, y_expert, y_back, comb;
  // Row maps (device-computed every invocation).
  DeviceBuffer send_token, route_row, recv_row, expert_row;
  // ON: count row, matrix, plan, per-route slots, copy list, READY view, fallback counter.
  DeviceBuffer count_row, matrix, plan, slot_ids, ops, num_ops, slot_expert, fallback_slots;
  DeviceBuffer error_word;
  // size_aware: rows per slot, the row buckets, and (while capturing) one switch handle per slot.
  DeviceBuffer slot_total;
  std::vector<int32_t> buckets;
  std::vector<uint64_t> handles;
  cuda::GraphFallbackParams fallback;
  OrderEvent start, plan_ready, gate_done;
  std::function<void(Stream)> copy_hook;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool pending = false;

  ~Impl() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (copy != nullptr) cudaStreamDestroy(copy);
    if (main != nullptr) cudaStreamDestroy(main);
  }
  uint16_t* rows(const DeviceBuffer& buf, int64_t row) const {
    return buf.get<uint16_t>() + row * dims.hidden;
  }
  // Fixed-size exchange: `rows_per_peer` rows to and from every rank (itself included).
  void exchange(const DeviceBuffer& from, DeviceBuffer& to, int64_t rows_per_peer) const;
  // One invocation on MAIN (and COPY); `capturing`: inside capture() (size-aware GEMMs).
  void enqueue(bool capturing);
  void enqueue_copy_stream();
  // switched: the expert GEMMs through switch nodes (size_aware, while capturing).
  void enqueue_main_stream(bool switched);
  // size_aware capture: one conditional handle per slot of the graph being captured on MAIN and
  // the kernel that sets them from the received rows.
  void select_buckets();
  // Expert GEMMs of slots [first, first + count) at M = C, or switched.
  void run_slots(int first, int count, bool switched);
};

void GraphEpMoeLayer::Impl::exchange(const DeviceBuffer& from, DeviceBuffer& to,
                                     int64_t rows_per_peer) const {
  const size_t elems = static_cast<size_t>(rows_per_peer) * dims.hidden;
  ISER_NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < dims.num_ranks; ++peer) {
    ISER_NCCL_CHECK(
        ncclSend(rows(from, peer * rows_per_peer), elems, ncclBfloat16, peer, comm, main));
    ISER_NCCL_CHECK(
        ncclRecv(rows(to, peer * rows_per_peer), elems, ncclBfloat16, peer, comm, main));
  }
  ISER_NCCL_CHECK(ncclGroupEnd());
}

void GraphEpMoeLayer::Impl::enqueue_copy_stream() {
  const int tau = dims.num_tokens;
  const int top_k = dims.top_k;
  start.wait(copy);
  planner->clear_errors(copy);
  planner->count(ids.get<int32_t>(), tau, top_k, count_row.get<int32_t>(), copy);
  runtime->exchange_counts(count_row.get<int32_t>(), matrix.get<int32_t>(), kDeviceGeneration,
                           copy);
  // Plan and route rewrite as one kernel (the rewrite's ordinals overlap the planner; the plan
  // and slot ids are plan() + rewrite()'s, bit for bit).
  planner->plan_rewrite(matrix.get<int32_t>(), plan.get<int32_t>(), ids.get<int32_t>(), tau, top_k,
                        rank, slot_ids.get<int32_t>(), copy);
  cuda::PlanCopyListParams list;
  list.plan = plan.get<int32_t>();
  list.broadcasts_offset = planner->layout().broadcasts();
  list.max_ops = max_ops;
  list.num_ranks = dims.num_ranks;
  list.experts_per_rank = dims.experts_per_rank;
  list.num_slots = config.topo.num_slots;
  list.ops = ops.get<CopyOp>();
  list.num_ops = num_ops.get<int32_t>();
  cuda::launch_plan_copy_list(list, copy);
  plan_ready.record(copy);
  if (copy_hook) copy_hook(copy);
  // NOTE: max_ops entries, null ops past the plan's B: neither the replication nor the gate acts
  // on a null op (group_size 0).
  runtime->replicate(ops.get<CopyOp>(), max_ops, 0, kDeviceGeneration, Transport::kPlan, copy);
  runtime->ready_gate(ops.get<CopyOp>(), max_ops, kDeviceGeneration, slot_expert.get<int32_t>(),
                      copy);
  gate_done.record(copy);
}

void GraphEpMoeLayer::Impl::select_buckets() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t captured = nullptr;
  ISER_CUDA_CHECK(cudaStreamGetCaptureInfo(main, &status, nullptr, &captured));
  ISER_CHECK(status == cudaStreamCaptureStatusActive,
             "ep graph layer: size-aware GEMMs need a capture (internal error)");
  const int num_buckets = static_cast<int>(buckets.size());
  // A handle for every slot that gets a switch node: the home slots, and the helpers when ON.
  const int num_handles = options.balance ? dims.slots_per_rank : dims.experts_per_rank;
  cuda::GraphSelectParams select;
  select.slot_total = slot_total.get<int32_t>();
  select.num_slots = num_handles;
  select.num_buckets = num_buckets;
  std::copy(buckets.begin(), buckets.end(), select.bucket_rows);
  handles.assign(num_handles, 0);
  for (int l = 0; l < num_handles; ++l) {
    // Default (a launch whose selector did not run): the largest bucket, C rows.
    cudaGraphConditionalHandle handle = 0;
    ISER_CUDA_CHECK(cudaGraphConditionalHandleCreate(&handle, captured, num_buckets - 1,
                                                     cudaGraphCondAssignDefault));
    handles[l] = handle;
    select.handles[l] = handle;
  }
  cuda::launch_graph_select(select, main);
}

void GraphEpMoeLayer::Impl::run_slots(int first, int count, bool switched) {
  if (count == 0) return;
  if (switched) {
    mlp->run_switched(x_expert.get(), y_expert.get(), dims.slot_rows, first,
                      std::span<const uint64_t>(handles).subspan(first, count), buckets, main);
    return;
  }
  // Every slot at M = C (a slot's unused rows hold stale bytes; rows are independent).
  // GroupedMlp::run packs the non-empty slots from its x's first row: x and y start at slot
  // `first`'s region.
  std::vector<int32_t> per_slot(dims.slots_per_rank, 0);
  std::fill(per_slot.begin() + first, per_slot.begin() + first + count, dims.slot_rows);
  const int64_t first_row = int64_t{first} * dims.slot_rows;
  mlp->run(rows(x_expert, first_row), per_slot, rows(y_expert, first_row), main);
}

void GraphEpMoeLayer::Impl::enqueue_main_stream(bool switched) {
  const bool balance = options.balance;
  const int tau = dims.num_tokens;
  const int hidden = dims.hidden;
  shared_mlp->run(input.get(), std::vector<int32_t>{tau}, shared_out.get(), main);
  if (balance) plan_ready.wait(main);

  cuda::GraphDispatchParams dispatch;
  dispatch.dims = dims;
  dispatch.topk_ids = ids.get<int32_t>();
  dispatch.slot_ids = balance ? slot_ids.get<int32_t>() : nullptr;
  dispatch.num_ops = balance ? num_ops.get<int32_t>() : nullptr;
  dispatch.send = send.get<uint16_t>();
  dispatch.send_token = send_token.get<int32_t>();
  dispatch.route_row = route_row.get<int32_t>();
  dispatch.error_word = error_word.get<uint32_t>();
  cuda::launch_graph_dispatch(dispatch, main);
  cuda::launch_map_rows({input.get<uint16_t>(), send.get<uint16_t>(), send_token.get<int32_t>(),
                         nullptr, dims.exchange_rows(), hidden},
                        main);
  exchange(send, recv, dims.block_rows());

  cuda::GraphReceiveParams receive;
  receive.dims = dims;
  receive.recv = recv.get<uint16_t>();
  receive.recv_row = recv_row.get<int32_t>();
  receive.expert_row = expert_row.get<int32_t>();
  receive.slot_total = switched ? slot_total.get<int32_t>() : nullptr;
  receive.error_word = error_word.get<uint32_t>();
  cuda::launch_graph_receive(receive, main);
  cuda::launch_map_rows({recv.get<uint16_t>(), x_expert.get<uint16_t>(), recv_row.get<int32_t>(),
                         expert_row.get<int32_t>(), dims.return_rows(), hidden},
                        main);
  if (switched) select_buckets();

  const int home = dims.experts_per_rank;
  run_slots(0, home, switched);
  if (balance && config.topo.num_slots > 0) {
    ISER_CUDA_CHECK(cudaMemsetAsync(fallback_slots.get(), 0, sizeof(uint32_t), main));
    gate_done.wait(main);
    cuda::launch_graph_fallback(fallback, main);
    run_slots(home, config.topo.num_slots, switched);
    runtime->release_bank(kDeviceGeneration, main);
  } else if (balance) {
    gate_done.wait(main);  // joins COPY (capture needs every stream joined)
    runtime->release_bank(kDeviceGeneration, main);
  }
  cuda::launch_map_rows({y_expert.get<uint16_t>(), y_back.get<uint16_t>(),
                         expert_row.get<int32_t>(), nullptr, dims.return_rows(), hidden},
                        main);
  exchange(y_back, comb, dims.peer_rows);
  cuda::launch_combine(
      {comb.get<uint16_t>(), route_row.get<int32_t>(), weights.get<float>(),
       shared_out.get<uint16_t>(), output.get<uint16_t>(), tau, dims.top_k, hidden},
      main);
}

GraphEpMoeLayer::GraphEpMoeLayer(const LayerConfig& config, Runtime& runtime, ncclComm* comm,
                                 const GraphLayerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const Topology& topo = config.topo;
  s.dims = graph_dims(config, options.balance);
  ISER_CHECK(runtime.num_local_ranks() == 1 && !runtime.is_logical(),
             "ep graph layer: needs a one-rank-per-process runtime ({} local ranks)",
             runtime.num_local_ranks());
  // NOTE: one helper bank, so the helper slots' addresses the graph holds never change.
  check_ep_runtime_config(config, runtime.config(), "ep graph layer");
  ISER_CHECK(comm != nullptr, "ep graph layer: null NCCL communicator");
  s.config = config;
  s.options = options;
  s.runtime = &runtime;
  s.comm = comm;
  s.rank = runtime.first_rank();
  int least = 0, greatest = 0;
  ISER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&s.main, cudaStreamNonBlocking, least));
  ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&s.copy, cudaStreamNonBlocking, greatest));

  const GraphDims& d = s.dims;
  const size_t row_bytes = static_cast<size_t>(d.hidden) * 2;
  const int64_t routes = int64_t{d.num_tokens} * d.top_k;
  // NOTE: the expert GEMMs pin the algorithms EpMoeLayer's pin (its reference rows: min(P tau k,
  // 1024)), so a token's bytes are the eager layer's whatever the slot capacity.
  GroupedMlpOptions mlp_options;
  mlp_options.reference_rows =
      static_cast<int>(std::min<int64_t>(int64_t{topo.num_ranks} * routes, 1024));
  mlp_options.reference_rows =
      static_cast<int>(std::min<int64_t>(mlp_options.reference_rows, d.expert_rows()));
  s.mlp =
      std::make_unique<GroupedMlp>(config.shape, d.slots_per_rank, d.expert_rows(), mlp_options);
  s.shared_mlp = std::make_unique<GroupedMlp>(config.shape, 1, d.num_tokens);
  s.shared = std::make_unique<ExpertBank>(config.shape, 1);
  s.input = DeviceBuffer(d.num_tokens * row_bytes);
  s.output = DeviceBuffer(d.num_tokens * row_bytes);
  s.shared_out = DeviceBuffer(d.num_tokens * row_bytes);
  s.ids = DeviceBuffer(routes * sizeof(int32_t));
  s.weights = DeviceBuffer(routes * sizeof(float));
  s.send = DeviceBuffer(d.exchange_rows() * row_bytes);
  s.recv = DeviceBuffer(d.exchange_rows() * row_bytes);
  s.x_expert = DeviceBuffer(d.expert_rows() * row_bytes);
  s.y_expert = DeviceBuffer(d.expert_rows() * row_bytes);
  s.y_back = DeviceBuffer(d.return_rows() * row_bytes);
  s.comb = DeviceBuffer(d.return_rows() * row_bytes);
  s.send_token = DeviceBuffer(d.exchange_rows() * sizeof(int32_t));
  s.route_row = DeviceBuffer(routes * sizeof(int32_t));
  s.recv_row = DeviceBuffer(d.return_rows() * sizeof(int32_t));
  s.expert_row = DeviceBuffer(d.return_rows() * sizeof(int32_t));
  s.error_word = DeviceBuffer(sizeof(uint32_t));
  // No routes until the caller writes some (-1 ids), zero inputs and weights; slot buffers
  // zeroed so that the rows a GEMM computes but nobody reads start finite.
  if (options.size_aware) {
    ISER_CHECK(d.slots_per_rank <= cuda::GraphSelectConfig::kMaxSlots,
               "ep graph layer: size_aware: H + S = {} slots exceed {}", d.slots_per_rank,
               cuda::GraphSelectConfig::kMaxSlots);
    // Buckets 8, 16, 32, ... below C, then C (at most kMaxBuckets: C <= 256).
    for (int bucket = 8; bucket < d.slot_rows; bucket *= 2) s.buckets.push_back(bucket);
    s.buckets.push_back(d.slot_rows);
    ISER_CHECK(static_cast<int>(s.buckets.size()) <= cuda::GraphSelectConfig::kMaxBuckets,
               "ep graph layer: size_aware: {} row buckets exceed {}", s.buckets.size(),
               cuda::GraphSelectConfig::kMaxBuckets);
    s.slot_total = DeviceBuffer(d.slots_per_rank * sizeof(int32_t));
  }
  // NOTE: the set-up's zeroing is on s.main, which the set-up synchronises at its end: a
  // cudaMemset (default stream) is not ordered before the non-blocking streams' kernels.
  ISER_CUDA_CHECK(cudaMemsetAsync(s.ids.get(), 0xff, s.ids.bytes(), s.main));
  for (DeviceBuffer* buf : {&s.input, &s.weights, &s.x_expert, &s.error_word}) {
    ISER_CUDA_CHECK(cudaMemsetAsync(buf->get(), 0, buf->bytes(), s.main));
  }

  if (options.balance) {
    s.planner = std::make_unique<GpuPlanner>(topo, static_cast<int>(routes),
                                             gpu_planner_options(config.policy));
    s.max_ops = s.planner->layout().max_broadcasts;
    ISER_CHECK(s.max_ops <= kMaxLocalCopyOps,
               "ep graph layer: the GPU plan may hold {} broadcasts; the copy list holds at most "
               "{}",
               s.max_ops, kMaxLocalCopyOps);
    s.count_row = DeviceBuffer(topo.num_experts * sizeof(int32_t));
    s.matrix = DeviceBuffer(static_cast<size_t>(topo.num_ranks) * topo.num_experts * 4);
    s.plan = DeviceBuffer(static_cast<size_t>(s.planner->plan_words()) * sizeof(int32_t));
    s.slot_ids = DeviceBuffer(routes * sizeof(int32_t));
    s.ops = DeviceBuffer(static_cast<size_t>(s.max_ops) * sizeof(CopyOp));
    s.num_ops = DeviceBuffer(sizeof(int32_t));
    s.slot_expert = DeviceBuffer(std::max(1, topo.num_ranks * topo.num_slots) * sizeof(int32_t));
    s.fallback_slots = DeviceBuffer(sizeof(uint32_t));
    for (DeviceBuffer* buf : {&s.plan, &s.num_ops, &s.fallback_slots}) {
      ISER_CUDA_CHECK(cudaMemsetAsync(buf->get(), 0, buf->bytes(), s.main));
    }
    // The refill's sources and destinations are fixed: home slots at the same offset of every
    // rank's symmetric region, and this rank's helper slots of the only bank.
    cuda::GraphFallbackParams& f = s.fallback;
    f.ops = s.ops.get<CopyOp>();
    f.max_ops = s.max_ops;
    f.slot_expert = s.slot_expert.get<int32_t>();
    f.rank = s.rank;
    f.num_ranks = topo.num_ranks;
    f.num_slots = topo.num_slots;
    f.experts_per_rank = topo.experts_per_rank();
    f.bytes = config.shape.bundle_bytes();
    f.home_stride = runtime.config().bundle.slot_stride();
    f.fallback_slots = s.fallback_slots.get<uint32_t>();
    const auto* local_base = static_cast<const char*>(runtime.peer_base(s.rank));
    const auto* local_home = static_cast<const char*>(runtime.home_bundle(0, 0, 0));
    for (int r = 0; r < topo.num_ranks; ++r) {
      f.home_base[r] = static_cast<const char*>(runtime.peer_base(r)) + (local_home - local_base);
    }
    for (int h = 0; h < topo.num_slots; ++h) f.dst[h] = runtime.helper_slot(0, 0, h);
  }

  // Slot weights as EpMoeLayer's: home bundles and the helper slots of bank 0.
  s.mlp->set_weights(ep_slot_weights(config, runtime), s.main);
  s.shared_mlp->set_weights(std::vector<SlotWeights>{s.shared->slot(0)}, s.main);
  ISER_CUDA_CHECK(cudaStreamSynchronize(s.main));
}

GraphEpMoeLayer::~GraphEpMoeLayer() {
  if (impl_ && impl_->main != nullptr) cudaStreamSynchronize(impl_->main);
  if (impl_ && impl_->copy != nullptr) cudaStreamSynchronize(impl_->copy);
}

const GraphDims& GraphEpMoeLayer::dims() const {
  return impl_->dims;
}
void* GraphEpMoeLayer::input() const {
  return impl_->input.get();
}
int32_t* GraphEpMoeLayer::topk_ids() const {
  return impl_->ids.get<int32_t>();
}
float* GraphEpMoeLayer::topk_weights() const {
  return impl_->weights.get<float>();
}
void* GraphEpMoeLayer::output() const {
  return impl_->output.get();
}
Stream GraphEpMoeLayer::stream() const {
  return impl_->main;
}
void GraphEpMoeLayer::set_copy_hook(std::function<void(Stream)> hook) {
  impl_->copy_hook = std::move(hook);
}

void GraphEpMoeLayer::fill_weights(uint64_t seed, float scale) {
  Impl& s = *impl_;
  fill_ep_weights(s.config, *s.runtime, s.rank, *s.shared, seed, scale, s.main);
}

void GraphEpMoeLayer::enqueue() {
  impl_->enqueue(false);
}

void GraphEpMoeLayer::Impl::enqueue(bool capturing) {
  ISER_CUDA_CHECK(cudaMemsetAsync(error_word.get(), 0, sizeof(uint32_t), main));
  start.record(main);
  if (options.balance) enqueue_copy_stream();
  enqueue_main_stream(capturing && options.size_aware);
  pending = true;
}

void GraphEpMoeLayer::capture() {
  Impl& s = *impl_;
  // One direct invocation first (collective, no routes unless the caller wrote some): NCCL
  // connects its peers, cuBLAS and the kernels load, outside the capture.
  enqueue();
  finish();
  if (s.exec != nullptr) {
    ISER_CUDA_CHECK(cudaGraphExecDestroy(s.exec));
    s.exec = nullptr;
  }
  if (s.graph != nullptr) {
    ISER_CUDA_CHECK(cudaGraphDestroy(s.graph));
    s.graph = nullptr;
  }
  ISER_CUDA_CHECK(cudaStreamBeginCapture(s.main, cudaStreamCaptureModeThreadLocal));
  try {
    s.enqueue(true);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(s.main, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
    s.pending = false;
    throw;
  }
  s.pending = false;
  ISER_CUDA_CHECK(cudaStreamEndCapture(s.main, &s.graph));
  // Per-node priorities: the COPY branch keeps the highest priority, as outside the graph.
  ISER_CUDA_CHECK(
      cudaGraphInstantiateWithFlags(&s.exec, s.graph, cudaGraphInstantiateFlagUseNodePriority));
  ISER_CUDA_CHECK(cudaGraphUpload(s.exec, s.main));
  ISER_CUDA_CHECK(cudaStreamSynchronize(s.main));
}

void GraphEpMoeLayer::launch() {
  Impl& s = *impl_;
  ISER_CHECK(s.exec != nullptr, "ep graph layer: launch() before capture()");
  ISER_CUDA_CHECK(cudaGraphLaunch(s.exec, s.main));
  s.pending = true;
}

GraphLayerResult GraphEpMoeLayer::finish() {
  Impl& s = *impl_;
  ISER_CHECK(s.pending, "ep graph layer: finish() without an enqueue() or launch()");
  s.pending = false;
  ISER_CUDA_CHECK(cudaStreamSynchronize(s.main));
  ISER_CUDA_CHECK(cudaStreamSynchronize(s.copy));
  GraphLayerResult result;
  uint32_t graph_errors = 0;
  ISER_CUDA_CHECK(
      cudaMemcpy(&graph_errors, s.error_word.get(), sizeof(uint32_t), cudaMemcpyDeviceToHost));
  uint32_t planner_errors = 0;
  if (s.options.balance) {
    ISER_CUDA_CHECK(cudaMemcpy(&result.fallback_slots, s.fallback_slots.get(), sizeof(uint32_t),
                               cudaMemcpyDeviceToHost));
    int32_t num_ops = 0;
    ISER_CUDA_CHECK(cudaMemcpy(&num_ops, s.num_ops.get(), sizeof(int32_t), cudaMemcpyDeviceToHost));
    planner_errors = s.planner->read_errors();
    // A plan with a status (the rewrite then routes every token home: kGpuPlanNotOk) or a copy
    // list the kernel refused ran unbalanced; the output is still correct.
    result.plan_rejected = num_ops < 0 || (planner_errors & kGpuPlanNotOk) != 0;
    if (result.plan_rejected) {
      std::fprintf(stderr,
                   "iser: ep graph layer rank %d: GPU plan rejected (planner %s, copy list %d "
                   "ops); invocation unbalanced\n",
                   s.rank, describe_gpu_status(planner_errors).c_str(), num_ops);
    }
  }
  // A READY failure was handled on the device (refill); any other runtime failure throws.
  const RuntimeStatus status = s.runtime->status(0);
  const bool ready_failure = status.code == StatusCode::kReadyTimeout ||
                             status.code == StatusCode::kCopyFailed ||
                             status.code == StatusCode::kReadyOvertaken;
  if (ready_failure && s.options.balance) {
    std::fprintf(stderr,
                 "iser: ep graph layer rank %d: %s; %u helper slot(s) recomputed from home "
                 "bundles\n",
                 s.rank, status.message().c_str(), result.fallback_slots);
    s.runtime->clear_status();
  } else {
    s.runtime->check_status();
  }
  ISER_CHECK(graph_errors == 0, "ep graph layer rank {}: invalid input: {}", s.rank,
             describe_graph_errors(graph_errors));
  const uint32_t fatal = planner_errors & ~static_cast<uint32_t>(kGpuPlanNotOk);
  ISER_CHECK(fatal == 0, "ep graph layer rank {}: GPU planner: {}", s.rank,
             describe_gpu_status(fatal));
  return result;
}

}  // namespace iser::moe
