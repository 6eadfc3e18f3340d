// Grouped gated MLP (include/iser/moe.h): two GEMM passes around one SiLU-multiply, either as
// cuBLAS grouped GEMMs (one call per pass) or as cublasLt calls with a pinned algorithm (one call
// per non-empty slot; see GemmBackend).
//
// Layout: cuBLAS is column-major, the activations are row-major [rows, features]. A row-major
// [rows, F] matrix is a column-major [F, rows] one, so per group
//   h13^T [2I, m] = (W13 [2I, He])^T-view  ·  x^T [He, m]   ->  gemm(T, N, 2I, m, He)
//   y^T  [He, m]  = (W2  [He, I])^T-view   ·  act^T [I, m]  ->  gemm(T, N, He, m, I)
// with lda = K (weights are row-major [N, K]), ldb = K, ldc = N.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/error.h"
#include "iser/moe.h"
#include "moe/cublas_check.h"
#include "moe/lt_gemm.h"

namespace iser::moe {

using cuda::DeviceBuffer;

void ExpertShape::check() const {
  ISER_CHECK(hidden > 0 && hidden % 8 == 0,
             "expert shape: hidden = {} must be a positive "
             "multiple of 8",
             hidden);
  ISER_CHECK(intermediate > 0 && intermediate % 8 == 0,
             "expert shape: intermediate = {} must be a positive multiple of 8", intermediate);
}

// ---- ExpertBank --------------------------------------------------------------------------------

struct ExpertBank::Impl {
  ExpertShape shape;
  int num_slots = 0;
  DeviceBuffer w13;
  DeviceBuffer w2;
};

ExpertBank::ExpertBank(ExpertShape shape, int num_slots) : impl_(std::make_unique<Impl>()) {
  shape.check();
  ISER_CHECK(num_slots > 0, "expert bank: num_slots = {} must be positive", num_slots);
  impl_->shape = shape;
  impl_->num_slots = num_slots;
  impl_->w13 = DeviceBuffer(static_cast<size_t>(num_slots) * shape.w13_elems() * 2);
  impl_->w2 = DeviceBuffer(static_cast<size_t>(num_slots) * shape.w2_elems() * 2);
}
ExpertBank::~ExpertBank() = default;
ExpertBank::ExpertBank(ExpertBank&&) noexcept = default;
ExpertBank& ExpertBank::operator=(ExpertBank&&) noexcept = default;

const ExpertShape& ExpertBank::shape() const {
  return impl_->shape;
}
int ExpertBank::num_slots() const {
  return impl_->num_slots;
}

void* ExpertBank::w13(int slot_idx) {
  ISER_CHECK(slot_idx >= 0 && slot_idx < impl_->num_slots, "expert bank: slot {} outside [0, {})",
             slot_idx, impl_->num_slots);
  return impl_->w13.get<uint16_t>() + slot_idx * impl_->shape.w13_elems();
}
void* ExpertBank::w2(int slot_idx) {
  ISER_CHECK(slot_idx >= 0 && slot_idx < impl_->num_slots, "expert bank: slot {} outside [0, {})",
             slot_idx, impl_->num_slots);
  return impl_->w2.get<uint16_t>() + slot_idx * impl_->shape.w2_elems();
}
SlotWeights ExpertBank::slot(int slot_idx) const {
  auto* self = const_cast<ExpertBank*>(this);
  return {self->w13(slot_idx), self->w2(slot_idx)};
}

void fill_expert_random(void* w13, void* w2, const ExpertShape& shape, int expert_idx,
                        uint64_t seed, float scale, Stream stream) {
  const uint64_t expert_seed = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(expert_idx);
  cuda::launch_fill_uniform(
      {static_cast<uint16_t*>(w13), shape.w13_elems(), expert_seed * 2, scale}, stream);
  cuda::launch_fill_uniform(
      {static_cast<uint16_t*>(w2), shape.w2_elems(), expert_seed * 2 + 1, scale}, stream);
}

void ExpertBank::fill_slot_random(int slot_idx, uint64_t seed, float scale, Stream stream) {
  fill_expert_random(w13(slot_idx), w2(slot_idx), impl_->shape, slot_idx, seed, scale, stream);
}

void ExpertBank::fill_random(uint64_t seed, float scale, Stream stream) {
  for (int s = 0; s < impl_->num_slots; ++s) fill_slot_random(s, seed, scale, stream);
}

void ExpertBank::copy_slot_from(int dst_slot, const ExpertBank& src, int src_slot, Stream stream) {
  const ExpertShape& a = impl_->shape;
  const ExpertShape& b = src.shape();
  ISER_CHECK(a.hidden == b.hidden && a.intermediate == b.intermediate,
             "expert bank: copy between shapes {}x{} and {}x{}", a.hidden, a.intermediate, b.hidden,
             b.intermediate);
  const SlotWeights from = src.slot(src_slot);
  ISER_CUDA_CHECK(cudaMemcpyAsync(w13(dst_slot), from.w13, a.w13_elems() * 2,
                                  cudaMemcpyDeviceToDevice, stream));
  ISER_CUDA_CHECK(
      cudaMemcpyAsync(w2(dst_slot), from.w2, a.w2_elems() * 2, cudaMemcpyDeviceToDevice, stream));
}

// ---- GroupedMlp --------------------------------------------------------------------------------

namespace {
// cuBLAS workspace set explicitly so that capture never allocates (and split-K has room).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxGroups = cuda::GroupPointersConfig::kMaxGroups;
constexpr int kMaxLanes = 16;
constexpr int kPriorityLanes = 2;
}  // namespace

struct GroupedMlp::Impl {
  ExpertShape shape;
  int num_slots = 0;
  int64_t max_rows = 0;
  GroupedMlpOptions options;
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  std::unique_ptr<PinnedLtGemm> gemm1, gemm2;  // kLtPinned
  std::vector<SlotWeights> host_table;
  DeviceBuffer workspace;
  // kLtPinned: per-slot work spread over a few streams (fork/join with events on the caller's
  // stream) so that one slot's last partial wave overlaps other slots' tiles.
  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    DeviceBuffer workspace;
    cudaStream_t body = nullptr;  // run_switched: captures the lane's switch bodies (lazily made)
  };
  std::vector<Lane> lanes;  // ordinary lanes, then kPriorityLanes when priority_below_rows > 0
  int num_ordinary_lanes = 0;
  cudaEvent_t fork_event = nullptr;
  DeviceBuffer h13;       // [max_rows, 2I]
  DeviceBuffer act;       // [max_rows, I]
  DeviceBuffer tables;    // w13 table [num_slots], w2 table [num_slots]
  DeviceBuffer pointers;  // [6][kMaxGroups]
  bool has_weights = false;

  // Host arrays of the two grouped calls (resized once, refilled per run).
  std::vector<cublasOperation_t> trans_a, trans_b;
  std::vector<int> m1, m2, n, k1, k2, one;
  std::vector<float> alpha, beta;

  ~Impl() {
    for (Lane& lane : lanes) {
      if (lane.done != nullptr) cudaEventDestroy(lane.done);
      if (lane.stream != nullptr) cudaStreamDestroy(lane.stream);
      if (lane.body != nullptr) cudaStreamDestroy(lane.body);
    }
    if (fork_event != nullptr) cudaEventDestroy(fork_event);
    gemm1.reset();
    gemm2.reset();
    if (lt != nullptr) cublasLtDestroy(lt);
    if (handle != nullptr) cublasDestroy(handle);
  }

  void run_grouped(cuda::GroupPointersParams& params, int64_t total_rows, Stream stream);
  void run_lt(const cuda::GroupPointersParams& params, int64_t total_rows, Stream stream);
  void run_lt_chained(const cuda::GroupPointersParams& params, Stream stream);
  // One slot's chain (GEMM 1 -> SiLU-multiply -> GEMM 2) over `rows` rows starting at row `row`
  // of x / y and of the scratch buffers.
  void run_slot_chain(int slot, const uint16_t* x, uint16_t* y, int64_t row, int64_t rows,
                      DeviceBuffer& ws, Stream stream);
  // Adds a switch node on `handle` with `num_bodies` bodies after the capture dependencies of
  // `stream`, which then depends on it; returns the bodies.
  static const cudaGraph_t* add_switch(Stream stream, uint64_t handle, int num_bodies);
  // Enqueues `work(lane_idx, lane stream, lane workspace)` for every lane in use between a fork
  // from and a join to `stream`; a single lane runs on `stream` itself.
  template <typename F>
  void fork_join(int num_used, Stream stream, F&& work);
};

GroupedMlp::GroupedMlp(ExpertShape shape, int num_slots, int64_t max_rows, GemmBackend backend)
    : GroupedMlp(shape, num_slots, max_rows, GroupedMlpOptions{.backend = backend}) {}

GroupedMlp::GroupedMlp(ExpertShape shape, int num_slots, int64_t max_rows,
                       const GroupedMlpOptions& options)
    : impl_(std::make_unique<Impl>()) {
  shape.check();
  ISER_CHECK(num_slots > 0 && num_slots <= kMaxGroups,
             "grouped mlp: num_slots = {} outside [1, {}]", num_slots, kMaxGroups);
  ISER_CHECK(max_rows > 0 && max_rows <= (int64_t{1} << 31) - 1,
             "grouped mlp: max_rows = {} outside [1, 2^31)", max_rows);
  ISER_CHECK(options.num_lanes >= 1 && options.num_lanes <= kMaxLanes,
             "grouped mlp: num_lanes = {} outside [1, {}]", options.num_lanes, kMaxLanes);
  ISER_CHECK(options.min_tail_granule >= 0, "grouped mlp: min_tail_granule = {} is negative",
             options.min_tail_granule);
  ISER_CHECK(options.priority_below_rows >= 0, "grouped mlp: priority_below_rows = {} is negative",
             options.priority_below_rows);
  ISER_CHECK(options.reference_rows >= 0 && options.reference_rows <= max_rows,
             "grouped mlp: reference_rows = {} outside [0, max_rows = {}]", options.reference_rows,
             max_rows);
  Impl& s = *impl_;
  s.shape = shape;
  s.num_slots = num_slots;
  s.max_rows = max_rows;
  s.options = options;
  s.workspace = DeviceBuffer(kCublasWorkspaceBytes);
  if (options.backend == GemmBackend::kLtPinned) {
    ISER_CUBLAS_CHECK(cublasLtCreate(&s.lt));
    // Tuned for the balanced per-slot size of the default shapes (1024 rows), valid for all.
    const int reference_rows = options.reference_rows > 0
                                   ? options.reference_rows
                                   : static_cast<int>(std::min<int64_t>(max_rows, 1024));
    s.gemm1 =
        std::make_unique<PinnedLtGemm>(s.lt, 2 * shape.intermediate, shape.hidden, reference_rows,
                                       max_rows, kCublasWorkspaceBytes, options.min_tail_granule);
    s.gemm2 =
        std::make_unique<PinnedLtGemm>(s.lt, shape.hidden, shape.intermediate, reference_rows,
                                       max_rows, kCublasWorkspaceBytes, options.min_tail_granule);
    ISER_CUDA_CHECK(cudaEventCreateWithFlags(&s.fork_event, cudaEventDisableTiming));
    s.num_ordinary_lanes = std::min(options.num_lanes, num_slots);
    const bool priority = options.chain_slots && options.priority_below_rows > 0;
    s.lanes.resize(s.num_ordinary_lanes + (priority ? kPriorityLanes : 0));
    int least_priority = 0, greatest_priority = 0;
    ISER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
    for (size_t l = 0; l < s.lanes.size(); ++l) {
      Impl::Lane& lane = s.lanes[l];
      const bool high = static_cast<int>(l) >= s.num_ordinary_lanes;
      ISER_CUDA_CHECK(cudaStreamCreateWithPriority(&lane.stream, cudaStreamNonBlocking,
                                                   high ? greatest_priority : least_priority));
      ISER_CUDA_CHECK(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming));
      lane.workspace = DeviceBuffer(kCublasWorkspaceBytes);
    }
  } else {
    ISER_CUBLAS_CHECK(cublasCreate(&s.handle));
    ISER_CUBLAS_CHECK(cublasSetWorkspace(s.handle, s.workspace.get(), s.workspace.bytes()));
  }
  s.h13 = DeviceBuffer(static_cast<size_t>(max_rows) * 2 * shape.intermediate * 2);
  s.act = DeviceBuffer(static_cast<size_t>(max_rows) * shape.intermediate * 2);
  s.tables = DeviceBuffer(static_cast<size_t>(2 * num_slots) * sizeof(void*));
  s.pointers = DeviceBuffer(static_cast<size_t>(6 * kMaxGroups) * sizeof(void*));
  s.trans_a.assign(num_slots, CUBLAS_OP_T);
  s.trans_b.assign(num_slots, CUBLAS_OP_N);
  s.m1.assign(num_slots, 2 * shape.intermediate);
  s.m2.assign(num_slots, shape.hidden);
  s.k1.assign(num_slots, shape.hidden);
  s.k2.assign(num_slots, shape.intermediate);
  s.n.assign(num_slots, 0);
  s.one.assign(num_slots, 1);
  s.alpha.assign(num_slots, 1.0f);
  s.beta.assign(num_slots, 0.0f);
}
GroupedMlp::~GroupedMlp() = default;
GroupedMlp::GroupedMlp(GroupedMlp&&) noexcept = default;
GroupedMlp& GroupedMlp::operator=(GroupedMlp&&) noexcept = default;

const ExpertShape& GroupedMlp::shape() const {
  return impl_->shape;
}
int GroupedMlp::num_slots() const {
  return impl_->num_slots;
}
int64_t GroupedMlp::max_rows() const {
  return impl_->max_rows;
}
GemmBackend GroupedMlp::backend() const {
  return impl_->options.backend;
}
const GroupedMlpOptions& GroupedMlp::options() const {
  return impl_->options;
}
std::string GroupedMlp::describe() const {
  const Impl& s = *impl_;
  if (s.options.backend == GemmBackend::kGrouped) return "cublasGemmGroupedBatchedEx";
  return fmt::format(
      "cublasLt pinned, {} lanes{}, {}, tails {}: gemm1 {}; gemm2 {}", s.num_ordinary_lanes,
      s.lanes.size() > static_cast<size_t>(s.num_ordinary_lanes)
          ? fmt::format(" + {} priority lanes for slots under {} rows", kPriorityLanes,
                        s.options.priority_below_rows)
          : "",
      s.options.chain_slots ? "slots chained" : "two passes",
      s.options.min_tail_granule > 0 ? fmt::format(">= {} rows", s.options.min_tail_granule)
                                     : "off",
      s.gemm1->description(), s.gemm2->description());
}

int64_t GroupedMlp::padded_rows(std::span<const int32_t> rows_per_slot) const {
  const Impl& s = *impl_;
  if (s.options.backend != GemmBackend::kLtPinned) return 0;
  int64_t padded = 0;
  for (const int32_t rows : rows_per_slot) {
    padded += s.gemm1->padded_rows(rows) + s.gemm2->padded_rows(rows);
  }
  return padded;
}

void GroupedMlp::set_weights(std::span<const SlotWeights> slots, Stream stream) {
  Impl& s = *impl_;
  ISER_CHECK(static_cast<int>(slots.size()) == s.num_slots,
             "grouped mlp: {} slot weights given, {} slots", slots.size(), s.num_slots);
  // Pageable source: cudaMemcpyAsync stages it before returning, so `table` may die here.
  std::vector<const void*> table(2 * static_cast<size_t>(s.num_slots));
  for (int i = 0; i < s.num_slots; ++i) {
    ISER_CHECK(slots[i].w13 != nullptr && slots[i].w2 != nullptr,
               "grouped mlp: slot {} has a null weight pointer", i);
    table[i] = slots[i].w13;
    table[s.num_slots + i] = slots[i].w2;
  }
  s.host_table.assign(slots.begin(), slots.end());
  ISER_CUDA_CHECK(cudaMemcpyAsync(s.tables.get(), table.data(), table.size() * sizeof(void*),
                                  cudaMemcpyHostToDevice, stream));
  s.has_weights = true;
}

void GroupedMlp::run(const void* x, std::span<const int32_t> rows_per_slot, void* y,
                     Stream stream) {
  Impl& s = *impl_;
  ISER_CHECK(s.has_weights, "grouped mlp: run() before set_weights()");
  ISER_CHECK(static_cast<int>(rows_per_slot.size()) == s.num_slots,
             "grouped mlp: rows_per_slot has {} entries, {} slots", rows_per_slot.size(),
             s.num_slots);
  cuda::GroupPointersParams params;
  params.x = static_cast<const uint16_t*>(x);
  params.y = static_cast<uint16_t*>(y);
  int64_t total_rows = 0;
  for (int slot = 0; slot < s.num_slots; ++slot) {
    const int32_t rows = rows_per_slot[slot];
    ISER_CHECK(rows >= 0, "grouped mlp: rows_per_slot[{}] = {} is negative", slot, rows);
    if (rows == 0) continue;
    params.slot[params.num_groups] = slot;
    params.row_begin[params.num_groups] = static_cast<int32_t>(total_rows);
    s.n[params.num_groups] = rows;
    ++params.num_groups;
    total_rows += rows;
    ISER_CHECK(total_rows <= s.max_rows, "grouped mlp: {}+ rows exceed max_rows = {}", total_rows,
               s.max_rows);
  }
  if (params.num_groups == 0) return;
  if (s.options.backend == GemmBackend::kLtPinned && s.options.chain_slots) {
    s.run_lt_chained(params, stream);
  } else if (s.options.backend == GemmBackend::kLtPinned) {
    s.run_lt(params, total_rows, stream);
  } else {
    s.run_grouped(params, total_rows, stream);
  }
}

template <typename F>
void GroupedMlp::Impl::fork_join(int num_used, Stream stream, F&& work) {
  if (num_used <= 1) {
    work(0, stream, workspace);
    return;
  }
  ISER_CUDA_CHECK(cudaEventRecord(fork_event, stream));
  for (int l = 0; l < num_used; ++l) {
    ISER_CUDA_CHECK(cudaStreamWaitEvent(lanes[l].stream, fork_event));
  }
  for (int l = 0; l < num_used; ++l) work(l, lanes[l].stream, lanes[l].workspace);
  for (int l = 0; l < num_used; ++l) {
    ISER_CUDA_CHECK(cudaEventRecord(lanes[l].done, lanes[l].stream));
    ISER_CUDA_CHECK(cudaStreamWaitEvent(stream, lanes[l].done));
  }
}

void GroupedMlp::Impl::run_lt(const cuda::GroupPointersParams& params, int64_t total_rows,
                              Stream stream) {
  const int64_t he = shape.hidden;
  const int64_t inter = shape.intermediate;
  const auto* x = static_cast<const uint16_t*>(params.x);
  auto* h = h13.get<uint16_t>();
  auto* a = act.get<uint16_t>();
  const int num_lanes = std::min(num_ordinary_lanes, params.num_groups);
  // One GEMM pass: group g on lane g % num_lanes.
  fork_join(num_lanes, stream, [&](int lane, cudaStream_t on, DeviceBuffer& ws) {
    for (int g = lane; g < params.num_groups; g += num_lanes) {
      const int64_t row = params.row_begin[g];
      gemm1->run(host_table[params.slot[g]].w13, x + row * he, h + row * 2 * inter, n[g], ws.get(),
                 ws.bytes(), on);
    }
  });
  cuda::launch_silu_mul({h, a, total_rows, shape.intermediate}, stream);
  fork_join(num_lanes, stream, [&](int lane, cudaStream_t on, DeviceBuffer& ws) {
    for (int g = lane; g < params.num_groups; g += num_lanes) {
      const int64_t row = params.row_begin[g];
      gemm2->run(host_table[params.slot[g]].w2, a + row * inter, params.y + row * he, n[g],
                 ws.get(), ws.bytes(), on);
    }
  });
}

void GroupedMlp::Impl::run_lt_chained(const cuda::GroupPointersParams& params, Stream stream) {
  const auto* x = static_cast<const uint16_t*>(params.x);
  const int num_ordinary = std::min(num_ordinary_lanes, params.num_groups);
  const int num_priority = static_cast<int>(lanes.size()) - num_ordinary_lanes;
  // Largest slot first to the least-loaded lane (ties: lower index), so the lanes end together;
  // small slots (priority_below_rows) smallest first over the priority lanes, which follow the
  // ordinary ones in `lanes`. fork_join uses lanes [0, num_used): with priority lanes every
  // ordinary lane is forked too (an idle one just joins).
  std::vector<int> order(params.num_groups);
  for (int g = 0; g < params.num_groups; ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(),
                   [&](int x_idx, int y_idx) { return n[x_idx] > n[y_idx]; });
  const int num_used = num_priority > 0 ? static_cast<int>(lanes.size()) : num_ordinary;
  std::vector<std::vector<int>> lane_groups(num_used);
  std::vector<int64_t> lane_rows(num_used, 0);
  const auto deal = [&](int g, int first, int count) {
    const auto begin = lane_rows.begin() + first;
    const int lane = first + static_cast<int>(std::min_element(begin, begin + count) - begin);
    lane_groups[lane].push_back(g);
    lane_rows[lane] += n[g];
  };
  for (auto it = order.rbegin(); num_priority > 0 && it != order.rend(); ++it) {
    if (n[*it] < options.priority_below_rows) deal(*it, num_ordinary_lanes, num_priority);
  }
  for (int g : order) {
    if (num_priority == 0 || n[g] >= options.priority_below_rows) deal(g, 0, num_ordinary);
  }
  fork_join(num_used, stream, [&](int lane, cudaStream_t on, DeviceBuffer& ws) {
    for (int g : lane_groups[lane]) {
      run_slot_chain(params.slot[g], x, params.y, params.row_begin[g], n[g], ws, on);
    }
  });
}

void GroupedMlp::Impl::run_slot_chain(int slot, const uint16_t* x, uint16_t* y, int64_t row,
                                      int64_t rows, DeviceBuffer& ws, Stream stream) {
  const int64_t he = shape.hidden;
  const int64_t inter = shape.intermediate;
  uint16_t* h = h13.get<uint16_t>() + row * 2 * inter;
  uint16_t* a = act.get<uint16_t>() + row * inter;
  const SlotWeights& w = host_table[slot];
  gemm1->run(w.w13, x + row * he, h, rows, ws.get(), ws.bytes(), stream);
  cuda::launch_silu_mul({h, a, rows, shape.intermediate}, stream);
  gemm2->run(w.w2, a, y + row * he, rows, ws.get(), ws.bytes(), stream);
}

const cudaGraph_t* GroupedMlp::Impl::add_switch(Stream stream, uint64_t handle, int num_bodies) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t num_deps = 0;
  ISER_CUDA_CHECK(
      cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &deps, &edges, &num_deps));
  ISER_CHECK(status == cudaStreamCaptureStatusActive,
             "grouped mlp: run_switched needs a stream that is capturing a CUDA graph");
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeSwitch;
  params.conditional.size = static_cast<unsigned>(num_bodies);
  cudaGraphNode_t node = nullptr;
  ISER_CUDA_CHECK(cudaGraphAddNode(&node, graph, deps, edges, num_deps, &params));
  ISER_CUDA_CHECK(cudaStreamUpdateCaptureDependencies(stream, &node, nullptr, 1,
                                                      cudaStreamSetCaptureDependencies));
  return params.conditional.phGraph_out;
}

void GroupedMlp::run_switched(const void* x, void* y, int64_t slot_rows, int first_slot,
                              std::span<const uint64_t> handles,
                              std::span<const int32_t> bucket_rows, Stream stream) {
  Impl& s = *impl_;
  const int num_slots = static_cast<int>(handles.size());
  ISER_CHECK(s.has_weights, "grouped mlp: run_switched() before set_weights()");
  ISER_CHECK(s.options.backend == GemmBackend::kLtPinned,
             "grouped mlp: run_switched needs the kLtPinned backend");
  ISER_CHECK(first_slot >= 0 && num_slots >= 1 && first_slot + num_slots <= s.num_slots,
             "grouped mlp: run_switched slots [{}, {}) outside [0, {})", first_slot,
             first_slot + num_slots, s.num_slots);
  ISER_CHECK(slot_rows >= 1 && (first_slot + num_slots) * slot_rows <= s.max_rows,
             "grouped mlp: run_switched: {} slots of {} rows exceed max_rows = {}",
             first_slot + num_slots, slot_rows, s.max_rows);
  ISER_CHECK(!bucket_rows.empty(), "grouped mlp: run_switched needs at least one bucket");
  for (size_t b = 0; b < bucket_rows.size(); ++b) {
    ISER_CHECK(bucket_rows[b] >= 1 && bucket_rows[b] <= slot_rows &&
                   (b == 0 || bucket_rows[b] > bucket_rows[b - 1]),
               "grouped mlp: run_switched bucket {} = {} rows (need increasing, in [1, {}])", b,
               bucket_rows[b], slot_rows);
  }
  const auto* xs = static_cast<const uint16_t*>(x);
  auto* ys = static_cast<uint16_t*>(y);
  const int num_bodies = static_cast<int>(bucket_rows.size());
  const int num_used = std::min(s.num_ordinary_lanes, num_slots);
  s.fork_join(num_used, stream, [&](int lane, cudaStream_t on, DeviceBuffer& ws) {
    // NOTE: a lane's switch nodes run one after the other (each depends on the previous one
    // through `on`), so its bodies share the lane's cuBLAS workspace; the scratch rows are the
    // slot's own (row s * slot_rows of h13 and act).
    cudaStream_t& body = s.lanes[static_cast<size_t>(lane)].body;
    if (body == nullptr) ISER_CUDA_CHECK(cudaStreamCreateWithFlags(&body, cudaStreamNonBlocking));
    for (int i = lane; i < num_slots; i += num_used) {
      const int slot = first_slot + i;
      const cudaGraph_t* bodies = Impl::add_switch(on, handles[static_cast<size_t>(i)], num_bodies);
      for (int b = 0; b < num_bodies; ++b) {
        ISER_CUDA_CHECK(cudaStreamBeginCaptureToGraph(body, bodies[b], nullptr, nullptr, 0,
                                                      cudaStreamCaptureModeThreadLocal));
        try {
          s.run_slot_chain(slot, xs, ys, slot * slot_rows, bucket_rows[static_cast<size_t>(b)], ws,
                           body);
        } catch (...) {
          cudaGraph_t partial = nullptr;
          cudaStreamEndCapture(body, &partial);
          throw;
        }
        cudaGraph_t captured = nullptr;
        ISER_CUDA_CHECK(cudaStreamEndCapture(body, &captured));
      }
    }
  });
}

void GroupedMlp::Impl::run_grouped(cuda::GroupPointersParams& params, int64_t total_rows,
                                   Stream stream) {
  Impl& s = *this;
  const auto** table = s.tables.get<const void*>();
  params.w13_table = table;
  params.w2_table = table + s.num_slots;
  params.h13 = s.h13.get<uint16_t>();
  params.act = s.act.get<uint16_t>();
  params.hidden = s.shape.hidden;
  params.intermediate = s.shape.intermediate;
  params.out = s.pointers.get<const void*>();
  cuda::launch_group_pointers(params, stream);

  const int groups = params.num_groups;
  const void* const* ptr = s.pointers.get<const void*>();
  ISER_CUBLAS_CHECK(cublasSetStream(s.handle, stream));
  // GEMM 1: h13 = x · W13^T (gate and up in one pass).
  ISER_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      s.handle, s.trans_a.data(), s.trans_b.data(), s.m1.data(), s.n.data(), s.k1.data(),
      s.alpha.data(), ptr + ptrdiff_t{0} * kMaxGroups, CUDA_R_16BF, s.k1.data(),
      ptr + ptrdiff_t{1} * kMaxGroups, CUDA_R_16BF, s.k1.data(), s.beta.data(),
      const_cast<void* const*>(ptr + ptrdiff_t{2} * kMaxGroups), CUDA_R_16BF, s.m1.data(), groups,
      s.one.data(), CUBLAS_COMPUTE_32F));
  cuda::launch_silu_mul(
      {s.h13.get<uint16_t>(), s.act.get<uint16_t>(), total_rows, s.shape.intermediate}, stream);
  // GEMM 2: y = act · W2^T.
  ISER_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      s.handle, s.trans_a.data(), s.trans_b.data(), s.m2.data(), s.n.data(), s.k2.data(),
      s.alpha.data(), ptr + ptrdiff_t{3} * kMaxGroups, CUDA_R_16BF, s.k2.data(),
      ptr + ptrdiff_t{4} * kMaxGroups, CUDA_R_16BF, s.k2.data(), s.beta.data(),
      const_cast<void* const*>(ptr + ptrdiff_t{5} * kMaxGroups), CUDA_R_16BF, s.m2.data(), groups,
      s.one.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace iser::moe
