// Runtime set-up (symmetric memory, peer mappings) and the host side of every runtime call.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda/device_buffer.h"
#include "cuda/host_lane.h"
#include "cuda/kernels.h"
#include "iser/error.h"
#include "iser/runtime.h"
#include "runtime/all_gather.h"
#include "runtime/host_staging.h"
#include "runtime/layout.h"
#include "runtime/peer_memory.h"

namespace iser {
namespace {

using runtime::all_gather;

// p2p-sami-host staging: rank 0's shared-memory name, and each rank's outcome of opening it.
struct StagingRecord {
  char name[64];
  int64_t bytes;
  int32_t ok;
};

}  // namespace

struct Runtime::DeviceMemory {
  cuda::DeviceBuffer regions;     // logical ranks: every local rank's region, back to back
  cuda::DeviceBuffer peer_bases;  // [P] char*
  cuda::DeviceBuffer scratch;     // [num_local] cuda::scratch_bytes()
  cuda::DeviceBuffer ce_ops;      // [kMaxLocalCopyOps] CopyOp
};

Runtime::Runtime(const RuntimeConfig& config) : config_(config), host_share_(config.host_share) {}

std::unique_ptr<Runtime> Runtime::logical(const RuntimeConfig& config) {
  config.validate();
  std::unique_ptr<Runtime> rt(new Runtime(config));
  rt->first_rank_ = 0;
  rt->allocate(config.num_ranks);
  const int64_t stride = rt->region_bytes_;
  rt->peer_bases_.resize(config.num_ranks);
  for (int r = 0; r < config.num_ranks; ++r) rt->peer_bases_[r] = rt->local_base_ + r * stride;
  ISER_CUDA_CHECK(cudaMemcpy(rt->device_peer_bases_, rt->peer_bases_.data(),
                             sizeof(char*) * config.num_ranks, cudaMemcpyHostToDevice));
  // Landed before any stream's kernel reads it (a pageable copy may return before its DMA ends).
  ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  const runtime::StagingLayout staging = runtime::make_staging_layout(config);
  if (staging.capacity > 0) rt->staging_ = HostStaging::allocate(staging.total());
  rt->describe_peer_memory(
      PeerMemoryMode::kLocal,
      fmt::format("{} logical ranks in one allocation on this GPU", config.num_ranks),
      runtime::multicast_blocker(config.multicast, PeerMemoryMode::kLocal));
  return rt;
}

Runtime::Runtime(const RuntimeConfig& config, Communicator& comm)
    : config_(config), host_share_(config.host_share) {
  comm_ = comm.get();
  const int num_ranks = comm.size();
  first_rank_ = comm.rank();
  // NOTE: every rank takes part in the fingerprint all-gather even when its own configuration is
  // invalid, so a bad rank makes every rank fail with the same diagnosis instead of a hang.
  ConfigFingerprint mine = fingerprint(config);
  std::string local_error;
  try {
    config.validate();
    ISER_CHECK(config.num_ranks == num_ranks,
               "runtime set-up: config num_ranks = {} but the communicator has {} ranks",
               config.num_ranks, num_ranks);
  } catch (const Error& e) {
    local_error = e.what();
    mine.version = -1;
  }
  const std::vector<ConfigFingerprint> all = all_gather(comm_, mine, num_ranks);
  ISER_CHECK(local_error.empty(), "{}", local_error);
  check_fingerprints(all);

  try {
    map_peers();
  } catch (...) {
    release();  // the destructor does not run for a throwing constructor
    throw;
  }
}

void Runtime::map_peers() {
  const int num_ranks = config_.num_ranks;
  allocate(1);
  // The region itself: an NCCL window or CUDA IPC, chosen collectively (runtime/peer_memory.h).
  peer_memory_ =
      runtime::map_peer_memory(comm_, first_rank_, num_ranks, region_bytes_, config_.peer_memory);
  local_base_ = peer_memory_->local();
  peer_bases_ = peer_memory_->peers();
  describe_peer_memory(
      peer_memory_->mode(), peer_memory_->reason(),
      runtime::multicast_unavailable_reason(comm_, config_.multicast, peer_memory_->mode()));
  ISER_CUDA_CHECK(cudaMemcpy(device_peer_bases_, peer_bases_.data(), sizeof(char*) * num_ranks,
                             cudaMemcpyHostToDevice));
  // Landed before any stream's kernel reads it (a pageable copy may return before its DMA ends).
  ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  map_staging();
  // Every rank has mapped every peer before anyone returns (a barrier over the all-gather).
  (void)all_gather(comm_, int32_t{1}, num_ranks);
}

void Runtime::describe_peer_memory(PeerMemoryMode mode, const std::string& reason,
                                   const std::string& multicast_reason) {
  multicast_available_ = multicast_reason.empty();
  multicast_reason_ = multicast_reason;
  description_ =
      runtime::describe_peer_memory(mode, reason, multicast_available_, multicast_reason);
}

PeerMemoryMode Runtime::peer_memory() const {
  return peer_memory_ ? peer_memory_->mode() : PeerMemoryMode::kLocal;
}

// p2p-sami-host: rank 0 creates the shared staging and passes its path; every other rank opens
// it; once all did (or one failed: every rank then throws, none hangs), rank 0 closes the path.
void Runtime::map_staging() {
  const int num_ranks = config_.num_ranks;
  const runtime::StagingLayout layout = runtime::make_staging_layout(config_);
  if (layout.capacity <= 0) return;
  StagingRecord mine{};
  mine.bytes = layout.total();
  std::string error;
  if (first_rank_ == 0) {
    try {
      staging_ = HostStaging::create_shared("iser-staging", mine.bytes);
      mine.ok = 1;
      std::snprintf(mine.name, sizeof(mine.name), "%s", staging_->path().c_str());
    } catch (const Error& e) {
      error = e.what();
    }
  }
  const std::vector<StagingRecord> created = all_gather(comm_, mine, num_ranks);
  if (first_rank_ != 0 && created[0].ok) {
    try {
      staging_ = HostStaging::open_shared(created[0].name, created[0].bytes);
      mine.ok = 1;
    } catch (const Error& e) {
      error = e.what();
    }
  }
  const std::vector<StagingRecord> opened = all_gather(comm_, mine, num_ranks);
  if (staging_) staging_->close_path();
  ISER_CHECK(error.empty(), "runtime set-up: {}", error);
  for (int r = 0; r < num_ranks; ++r) {
    ISER_CHECK(opened[r].ok, "runtime set-up: rank {} could not map the host staging", r);
  }
}

void Runtime::allocate(int num_local) {
  const runtime::RegionLayout layout = runtime::make_region_layout(config_);
  region_bytes_ = layout.total;
  num_local_ranks_ = num_local;
  device_memory_ = std::make_unique<DeviceMemory>();
  DeviceMemory& memory = *device_memory_;
  if (comm_ == nullptr) {  // logical ranks; one process per GPU: map_peers (peer memory)
    memory.regions = cuda::DeviceBuffer(static_cast<size_t>(region_bytes_) * num_local);
    local_base_ = memory.regions.get<char>();
    ISER_CUDA_CHECK(cudaMemset(local_base_, 0, region_bytes_ * num_local));
  }
  memory.peer_bases = cuda::DeviceBuffer(sizeof(char*) * config_.num_ranks);
  memory.scratch = cuda::DeviceBuffer(cuda::scratch_bytes() * num_local);
  memory.ce_ops = cuda::DeviceBuffer(sizeof(CopyOp) * kMaxLocalCopyOps);
  device_peer_bases_ = memory.peer_bases.get();
  device_scratch_ = memory.scratch.get();
  device_ce_ops_ = memory.ce_ops.get();
  ISER_CUDA_CHECK(cudaMemset(device_scratch_, 0, memory.scratch.bytes()));
  cuda::preload_replicate_kernels();
  cuda::preload_exchange_kernels();
  cuda::preload_gate_kernels();
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
}

Runtime::~Runtime() {
  release();
}

void Runtime::release() noexcept {
  cudaDeviceSynchronize();
  for (const auto& [stream, event] : tracked_) cudaEventDestroy(event);
  tracked_.clear();
  if (status_stream_ != nullptr) cudaStreamDestroy(status_stream_);
  status_stream_ = nullptr;
  staging_.reset();
  device_memory_.reset();  // owns local_base_ for logical ranks
  peer_memory_.reset();    // owns local_base_ for one process per GPU
  device_ce_ops_ = device_scratch_ = device_peer_bases_ = nullptr;
  local_base_ = nullptr;
}

void Runtime::check_local(int local_idx) const {
  ISER_CHECK(local_idx >= 0 && local_idx < num_local_ranks_,
             "runtime: local rank = {} not in [0, {})", local_idx, num_local_ranks_);
}

void* Runtime::peer_base(int rank_idx) const {
  ISER_CHECK(rank_idx >= 0 && rank_idx < config_.num_ranks, "runtime: rank = {} not in [0, {})",
             rank_idx, config_.num_ranks);
  return peer_bases_[rank_idx];
}

void* Runtime::home_bundle(int local_idx, int layer, int home_idx) const {
  check_local(local_idx);
  ISER_CHECK(layer >= 0 && layer < config_.num_layers, "runtime: layer = {} not in [0, {})", layer,
             config_.num_layers);
  ISER_CHECK(home_idx >= 0 && home_idx < config_.experts_per_rank(),
             "runtime: home expert = {} not in [0, {})", home_idx, config_.experts_per_rank());
  const runtime::RegionLayout layout = runtime::make_region_layout(config_);
  return local_base_ + local_idx * region_bytes_ + layout.home_slot(layer, home_idx);
}

void* Runtime::helper_slot(int local_idx, int bank, int helper_idx) const {
  check_local(local_idx);
  ISER_CHECK(bank >= 0 && bank < config_.num_banks, "runtime: bank = {} not in [0, {})", bank,
             config_.num_banks);
  ISER_CHECK(helper_idx >= 0 && helper_idx < config_.num_slots,
             "runtime: helper = {} not in [0, {})", helper_idx, config_.num_slots);
  const runtime::RegionLayout layout = runtime::make_region_layout(config_);
  return local_base_ + local_idx * region_bytes_ + layout.helper_slot(bank, helper_idx);
}

namespace {

cuda::RankSpace make_space(const RuntimeConfig& config, void* peer_bases, int first_rank,
                           void* scratch) {
  cuda::RankSpace space;
  space.peer_bases = static_cast<char* const*>(peer_bases);
  space.layout = runtime::make_region_layout(config);
  space.first_rank = first_rank;
  space.scratch = static_cast<cuda::Scratch*>(scratch);
  space.timeout_ns = static_cast<uint64_t>(config.timeout_us) * 1000;
  return space;
}

// Who writes an op under a transport (kNoModeOverride: as the op says).
int32_t mode_override(Transport transport) {
  switch (transport) {
    case Transport::kP2PDirect:
    case Transport::kCopyEngine:
      return runtime::mode_override_of(TransportMode::kOwnerDirect);
    case Transport::kP2PSami:
      return runtime::mode_override_of(TransportMode::kSami);
    case Transport::kP2PSamiOwner:
    case Transport::kP2PSamiHost:  // the same writers; the host lane adds no writer
      return runtime::mode_override_of(TransportMode::kSamiOwner);
    case Transport::kPlan:
      return runtime::kNoModeOverride;
  }
  return runtime::kNoModeOverride;
}

}  // namespace

void Runtime::exchange_counts(const int32_t* rows, int32_t* matrix, uint64_t epoch,
                              StreamHandle stream) {
  exchange_counts_ranks(0, num_local_ranks_, rows, matrix, epoch, stream);
}

void Runtime::exchange_counts_ranks(int local_begin, int local_end, const int32_t* rows,
                                    int32_t* matrix, uint64_t epoch, StreamHandle stream) {
  ISER_CHECK(rows != nullptr && matrix != nullptr, "count exchange: null rows or matrix");
  ISER_CHECK(0 <= local_begin && local_begin < local_end && local_end <= num_local_ranks_,
             "count exchange: local ranks [{}, {}) not inside [0, {})", local_begin, local_end,
             num_local_ranks_);
  cuda::launch_count_exchange(make_space(config_, device_peer_bases_, first_rank_, device_scratch_),
                              rows, matrix, epoch, local_begin, local_end, stream);
  track(stream);
}

void Runtime::count_and_exchange(const CountInput& count, int32_t* matrix, uint64_t epoch,
                                 StreamHandle stream) {
  ISER_CHECK(count.topk_ids != nullptr && count.tile_counts != nullptr &&
                 count.error_word != nullptr && matrix != nullptr,
             "count exchange: null topk_ids, tile_counts, error_word or matrix");
  ISER_CHECK(count.num_routes >= 0, "count exchange: num_routes = {} must be >= 0",
             count.num_routes);
  cuda::ExchangeCount in;
  in.topk_ids = count.topk_ids;
  in.num_routes = count.num_routes;
  in.rows = count.rows;
  in.tile_counts = count.tile_counts;
  in.error_word = count.error_word;
  cuda::launch_count_exchange(make_space(config_, device_peer_bases_, first_rank_, device_scratch_),
                              nullptr, matrix, epoch, 0, num_local_ranks_, stream, in);
  track(stream);
}

void Runtime::replicate(const CopyOp* ops, int num_ops, int layer, uint64_t generation,
                        Transport transport, StreamHandle stream, int num_sms) {
  launch_replicate(0, num_local_ranks_, ops, num_ops, layer, generation, transport, stream,
                   num_sms);
}

void Runtime::replicate_ranks(int local_begin, int local_end, const CopyOp* ops, int num_ops,
                              int layer, uint64_t generation, Transport transport,
                              StreamHandle stream, int num_sms) {
  ISER_CHECK(0 <= local_begin && local_begin < local_end && local_end <= num_local_ranks_,
             "replicate: local ranks [{}, {}) not inside [0, {})", local_begin, local_end,
             num_local_ranks_);
  launch_replicate(local_begin, local_end, ops, num_ops, layer, generation, transport, stream,
                   num_sms);
}

void Runtime::launch_replicate(int local_begin, int local_end, const CopyOp* ops, int num_ops,
                               int layer, uint64_t generation, Transport transport,
                               StreamHandle stream, int num_sms) {
  ISER_CHECK(layer >= 0 && layer < config_.num_layers, "replicate: layer = {} not in [0, {})",
             layer, config_.num_layers);
  ISER_CHECK(num_ops >= 0 && num_ops <= kMaxLocalCopyOps, "replicate: num_ops = {} not in [0, {}]",
             num_ops, kMaxLocalCopyOps);
  ISER_CHECK(num_ops == 0 || ops != nullptr, "replicate: {} ops but a null op list", num_ops);
  ISER_CHECK(num_sms >= 0 && num_sms <= 1024, "replicate: num_sms = {} not in [0, 1024]", num_sms);
  cuda::ReplicateArgs args;
  args.ops = ops;
  args.num_ops = num_ops;
  args.layer = layer;
  args.generation = generation;
  ISER_CHECK(transport != Transport::kCopyEngine,
             "replicate: the copy-engine transport needs a host copy list "
             "(Runtime::replicate_copy_engine)");
  args.mode_override = mode_override(transport);
  const int copy_ctas = num_sms > 0 ? num_sms : config_.copy_sms;
  if (transport == Transport::kP2PSamiHost && host_slices() > 0) {
    args.host_slices = host_slices();
    args.host_ctas = config_.host_sms;
    args.host_path = config_.host_path;
    args.staging = staging_->device();
    args.staging_layout = runtime::make_staging_layout(config_);
    // NOTE: members spin on flags that other ranks' CTAs of the same launch publish; in logical
    // mode every rank's CTAs must therefore be resident at once (one CTA per SM at most).
    if (local_end - local_begin > 1) {
      int device = 0;
      int num_device_sms = 0;
      ISER_CUDA_CHECK(cudaGetDevice(&device));
      ISER_CUDA_CHECK(
          cudaDeviceGetAttribute(&num_device_sms, cudaDevAttrMultiProcessorCount, device));
      const int needed = (copy_ctas + args.host_ctas) * (local_end - local_begin);
      ISER_CHECK(needed <= num_device_sms,
                 "replicate: p2p-sami-host with {} logical ranks needs ({} + {} host) x {} = {} "
                 "resident CTAs, the GPU has {} SMs",
                 local_end - local_begin, copy_ctas, args.host_ctas, local_end - local_begin,
                 needed, num_device_sms);
    }
  }
  cuda::launch_replicate(
      make_space(config_, device_peer_bases_, first_rank_, device_scratch_), args, local_begin,
      local_end, copy_ctas,
      cuda::resolve_copy_shape(config_.copy_path, config_.copy_warps, config_.copy_stages), stream);
  track(stream);
}

void Runtime::replicate_copy_engine(std::span<const CopyOp> ops, int layer, uint64_t generation,
                                    StreamHandle stream) {
  ISER_CHECK(generation != kDeviceGeneration,
             "replicate: the copy-engine transport needs an explicit generation (the host picks "
             "the bank of every copy), got kDeviceGeneration");
  ISER_CHECK(layer >= 0 && layer < config_.num_layers, "replicate: layer = {} not in [0, {})",
             layer, config_.num_layers);
  validate_copy_list(config_, ops);
  const cuda::RankSpace space =
      make_space(config_, device_peer_bases_, first_rank_, device_scratch_);
  if (!ops.empty()) {
    ISER_CUDA_CHECK(cudaMemcpyAsync(device_ce_ops_, ops.data(), ops.size_bytes(),
                                    cudaMemcpyHostToDevice, stream));
  }
  const int bank = bank_of(generation);
  cuda::launch_copy_engine_fence(space, static_cast<const CopyOp*>(device_ce_ops_),
                                 static_cast<int>(ops.size()), generation, config_.num_banks,
                                 num_local_ranks_, stream);
  const runtime::RegionLayout& layout = space.layout;
  const int h = config_.experts_per_rank();
  for (const CopyOp& op : ops) {
    if (op.owner < first_rank_ || op.owner >= first_rank_ + num_local_ranks_) continue;
    const char* src = peer_bases_[op.owner] + layout.home_slot(layer, op.expert % h);
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      char* dst = peer_bases_[m] + layout.helper_slot(bank, op.helper);
      ISER_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(layout.bundle_bytes),
                                      cudaMemcpyDeviceToDevice, stream));
    }
  }
  cuda::launch_publish_ready(space, generation, num_local_ranks_, stream);
  track(stream);
}

void Runtime::ready_gate(const CopyOp* ops, int num_ops, uint64_t generation, int32_t* slot_expert,
                         StreamHandle stream, Transport transport) {
  ISER_CHECK(num_ops >= 0 && num_ops <= kMaxLocalCopyOps, "READY gate: num_ops = {} not in [0, {}]",
             num_ops, kMaxLocalCopyOps);
  ISER_CHECK(num_ops == 0 || ops != nullptr, "READY gate: {} ops but a null op list", num_ops);
  ISER_CHECK(slot_expert != nullptr, "READY gate: null slot_expert");
  cuda::launch_ready_gate(make_space(config_, device_peer_bases_, first_rank_, device_scratch_),
                          ops, num_ops, generation, slot_expert, mode_override(transport),
                          num_local_ranks_, stream);
  track(stream);
}

void Runtime::fallback_rewrite(const int32_t* slot_expert, const int32_t* expert_ids,
                               int32_t* slot_ids, int64_t routes_per_rank, StreamHandle stream) {
  cuda::launch_fallback_rewrite(
      make_space(config_, device_peer_bases_, first_rank_, device_scratch_), slot_expert,
      expert_ids, slot_ids, routes_per_rank, num_local_ranks_, stream);
  track(stream);
}

void Runtime::release_bank(uint64_t generation, StreamHandle stream) {
  cuda::launch_release_bank(make_space(config_, device_peer_bases_, first_rank_, device_scratch_),
                            generation, num_local_ranks_, stream);
  track(stream);
}

// NOTE: the events order a status read after the runtime's own work on every stream it was
// given (a kernel that reports writes the status word before it completes), without waiting
// for anything else the application runs on the device. One event per stream, re-recorded:
// the last work on a stream completes after the earlier work there.
void Runtime::track(StreamHandle stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();  // the legacy stream during another stream's global capture
    return;
  }
  if (capture != cudaStreamCaptureStatusNone) return;
  for (const auto& [tracked, event] : tracked_) {
    if (tracked == stream) {
      ISER_CUDA_CHECK(cudaEventRecord(event, stream));
      return;
    }
  }
  cudaEvent_t event = nullptr;
  ISER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  tracked_.emplace_back(stream, event);
  ISER_CUDA_CHECK(cudaEventRecord(event, stream));
}

void Runtime::read_scratch(int local_idx, void* scratch, int64_t bytes) const {
  check_local(local_idx);
  for (const auto& [stream, event] : tracked_) ISER_CUDA_CHECK(cudaEventSynchronize(event));
  for (const auto& [stream, event] : tracked_) cudaEventDestroy(event);
  tracked_.clear();
  if (status_stream_ == nullptr) {
    ISER_CUDA_CHECK(cudaStreamCreateWithFlags(&status_stream_, cudaStreamNonBlocking));
  }
  ISER_CUDA_CHECK(cudaMemcpyAsync(
      scratch, static_cast<const char*>(device_scratch_) + cuda::scratch_bytes() * local_idx,
      static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, status_stream_));
  ISER_CUDA_CHECK(cudaStreamSynchronize(status_stream_));
}

RuntimeStatus Runtime::status(int local_idx) const {
  cuda::Scratch scratch{};
  read_scratch(local_idx, &scratch, sizeof(scratch));
  RuntimeStatus s;
  s.code = static_cast<StatusCode>(scratch.code);
  s.peer = scratch.peer;
  s.tag = scratch.tag;
  s.fallback_routes = scratch.fallback_routes;
  return s;
}

uint64_t Runtime::last_generation(int local_idx) const {
  check_local(local_idx);
  cuda::Scratch scratch{};
  read_scratch(local_idx, &scratch, sizeof(scratch));
  return scratch.generation;
}

void Runtime::set_copy_shape(CopyPath path, int warps, int stages) {
  RuntimeConfig next = config_;
  next.copy_path = path;
  next.copy_warps = warps;
  next.copy_stages = stages;
  next.validate();
  config_ = next;
}

void Runtime::set_host_share(double share, int host_sms) {
  const int64_t num_slices = config_.bundle.num_slices();
  ISER_CHECK(share >= 0.0 && runtime::host_lane_slices(num_slices, share) <=
                                 runtime::host_lane_slices(num_slices, config_.host_share),
             "runtime: host share {} not in [0, {}] (RuntimeConfig::host_share sized the staging)",
             share, config_.host_share);
  ISER_CHECK(host_sms >= 0 && host_sms <= 64, "runtime: host_sms = {} not in [0, 64]", host_sms);
  host_share_ = share;
  if (host_sms > 0) config_.host_sms = host_sms;
}

void Runtime::set_host_path(CopyPath path) {
  RuntimeConfig next = config_;
  next.host_path = path;
  next.validate();
  config_ = next;
}

int64_t Runtime::host_slices() const {
  return staging_ ? runtime::host_lane_slices(config_.bundle.num_slices(), host_share_) : 0;
}

void Runtime::check_status() const {
  for (int i = 0; i < num_local_ranks_; ++i) {
    const RuntimeStatus s = status(i);
    ISER_CHECK(s.code == StatusCode::kOk, "runtime: rank {}: {}", first_rank_ + i, s.message());
  }
}

void Runtime::clear_status(StreamHandle stream) {
  // The status words only (see cuda::Scratch): the completion counters belong to the replicate
  // launches (a launch still in flight on another stream keeps counting on them), the generation
  // counters survive (kDeviceGeneration continues).
  ISER_CUDA_CHECK(cudaMemset2DAsync(device_scratch_, cuda::scratch_bytes(), 0,
                                    offsetof(cuda::Scratch, replicate_arrivals), num_local_ranks_,
                                    stream));
  track(stream);
  // NOTE: the legacy stream is not ordered before non-blocking streams: wait for the clearing so
  // that it cannot land after (and erase) a status the caller's next work reports.
  if (stream == nullptr) ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

}  // namespace iser
