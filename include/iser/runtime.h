// GPU runtime (docs/design.md §9): NCCL bootstrap, symmetric per-rank memory with peer pointers,
// helper banks, count exchange, replication transports, READY gate, bank-reuse fence and home
// fallback.
//
// Two modes share one API:
//  - one process per GPU: `Runtime(config, communicator)`; this process holds one rank;
//  - logical ranks: `Runtime::logical(config)` places all P ranks on the current GPU in one
//    process (tests, single-GPU development); every call then acts on all P ranks at once.
// Calls that take a stream enqueue work and return; device-side failures (a peer that never
// arrives) land in a status word that `status()` reads and `check_status()` turns into an
// iser::Error. No CUDA types appear here: streams are `struct CUstream_st*` (= cudaStream_t).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "iser/copy_list.h"
#include "iser/replication.h"

struct CUstream_st;
struct CUevent_st;
struct ncclComm;

namespace iser {

using StreamHandle = CUstream_st*;

namespace testing {
struct Access;  // include/iser/testing/hooks.h (testing-only; not installed)
}  // namespace testing

// Bumped whenever the memory layout or the device protocol changes; ranks must agree.
inline constexpr int kRuntimeVersion = 3;         // 2: p2p-sami-host (host staging, fingerprint)
                                                  // 3: count rows stamped by epoch
inline constexpr int64_t kBundleAlignment = 256;  // scales start at a 256-byte boundary
inline constexpr int64_t kSlotAlignment = 4096;   // every slot starts at a 4-KiB boundary
inline constexpr int kDefaultCopySms = 8;
inline constexpr int kDefaultHostSms = 4;  // host-lane CTAs per rank (p2p-sami-host)
// The host share that moved one 37.16 MB bundle fastest on 2 x H200 (docs/benchmarks.md); the
// runtime default stays 0 (opt-in: PCIe also carries NIC and host traffic on real servers).
inline constexpr double kMeasuredHostShare = 0.08;

// One expert's bytes as they sit in a slot (home or helper): weights at offset 0, scales at
// scale_offset() = align_up(weight_bytes, 256), bundle bytes() = scale_offset() + scale_bytes.
// Slots are slot_stride() = align_up(bytes(), 4096) apart. Both sizes must be multiples of 16.
struct BundleLayout {
  int64_t weight_bytes = 0;
  int64_t scale_bytes = 0;

  int64_t scale_offset() const;
  int64_t bytes() const;
  int64_t slot_stride() const;
  int64_t num_slices() const { return (bytes() + kSliceBytes - 1) / kSliceBytes; }
  void validate() const;  // throws iser::Error naming the field
  friend bool operator==(const BundleLayout&, const BundleLayout&) = default;
};

enum class Transport : uint8_t {
  kP2PDirect = 0,   // writer(s) store every slice to every member (SAMI ops keep SAMI slicing)
  kP2PSami = 1,     // every op uses SAMI slicing: member i moves slices j = i (mod g)
  kCopyEngine = 2,  // cudaMemcpyAsync from the owner to every member (needs a host copy list)
  // 3 is kept free for an NVLink multicast transport: the kernels' multimem store path is
  // compiled, but the runtime binds no multicast objects, so none is offered.
  kPlan = 4,          // as the plan says: owner-direct ops direct, SAMI ops SAMI (the default)
  kP2PSamiOwner = 5,  // owner-assisted SAMI: every op SAMI, and an owner outside its group of g
                      // joins the members as writer g of g + 1 (slices j = g (mod g + 1)): the
                      // SMs at both ends drive the owner -> member links, each member's slot
                      // still gets one store per slice; owner inside its group: plain SAMI
  kP2PSamiHost = 6,   // p2p-sami-owner over NVLink for the head of every op's slices, plus a host
                      // lane for the tail (RuntimeConfig::host_share): the owner stages it in
                      // pinned host memory over its PCIe link, every other member fetches it over
                      // its own (src/cuda/host_lane.h). host_share 0: exactly p2p-sami-owner
};
std::string_view to_string(Transport transport);
// "p2p-direct", "p2p-sami", ...; "multicast" throws iser::Error saying why it is not offered.
Transport transport_from_string(std::string_view name);
std::string_view to_string(CopyPath path);

// How a rank reaches its peers' symmetric regions (docs/runtime.md, "Peer memory").
enum class PeerMemoryMode : uint8_t {
  kAuto = 0,   // request only: ISER_PEER_MEMORY when set, else nccl where every rank can, else ipc
  kNccl = 1,   // NCCL symmetric window (ncclMemAlloc + ncclCommWindowRegister), LSA peer pointers
  kIpc = 2,    // cudaMalloc + CUDA IPC handles (one node; NCCL older than 2.28)
  kLocal = 3,  // logical ranks: one allocation on the current GPU (not a request)
};
std::string_view to_string(PeerMemoryMode mode);
PeerMemoryMode peer_memory_from_string(std::string_view name);  // "auto", "nccl", "ipc"

struct RuntimeConfig {
  int num_ranks = 0;    // P
  int num_experts = 0;  // E (P | E)
  int num_slots = 0;    // S helper slots per rank per bank
  BundleLayout bundle;
  int num_layers = 1;  // home weight sets held in symmetric memory (one per MoE layer)
  int num_banks = 1;   // helper banks shared by all layers (1 or 2); generation g uses g % banks
  int copy_sms = kDefaultCopySms;  // CTAs per rank of the replicate kernel
  CopyPath copy_path = CopyPath::kBulk;
  int copy_warps = 0;   // warps per copy CTA, [0, 16] (0: the path's default)
  int copy_stages = 0;  // bulk path: 8-KiB shared-memory stages per warp (0: default); the
                        // stages of a CTA (warps x stages) must fit in kMaxCopyStagesPerCta
  int64_t timeout_us = 2'000'000;  // device-side waits give up (and report) after this
  // p2p-sami-host: the fraction of every op's slices (its tail) that goes through pinned host
  // memory, in [0, 1]. > 0 allocates the host staging at set-up (collective, sized for this
  // share; Runtime::set_host_share lowers it per call); 0: p2p-sami-host = p2p-sami-owner.
  double host_share = 0.0;
  int host_sms = kDefaultHostSms;  // host-lane CTAs per rank, beside copy_sms, [1, 64]
  // How a host-lane warp moves its chunks: kBulk pipelines them through the copy shape's 8-KiB
  // shared-memory stages (TMA bulk copies; with the bulk copy path only, else registers);
  // kRegisters copies them through registers, 4 KiB at a time.
  CopyPath host_path = CopyPath::kBulk;
  // Peer memory (one process per GPU): kAuto, kNccl (refused at set-up where a rank cannot
  // register the window) or kIpc; every rank must ask for the same. Logical mode ignores it.
  PeerMemoryMode peer_memory = PeerMemoryMode::kAuto;
  // Opt-in to the multicast transport; it is used only where NCCL reports multimem support
  // (Runtime::describe() says why not otherwise). iser never creates a multicast object itself.
  bool multicast = false;

  int experts_per_rank() const { return num_experts / num_ranks; }
  void validate() const;  // throws iser::Error naming the field and value
};

// What a rank presents at set-up; all ranks must present identical fingerprints.
struct ConfigFingerprint {
  int32_t version = kRuntimeVersion;
  int32_t num_ranks = 0;
  int32_t num_experts = 0;
  int32_t num_slots = 0;
  int32_t num_layers = 0;
  int32_t num_banks = 0;
  int64_t weight_bytes = 0;
  int64_t scale_bytes = 0;
  int64_t host_slices = 0;  // staging capacity per op (RuntimeConfig::host_share)
  friend bool operator==(const ConfigFingerprint&, const ConfigFingerprint&) = default;
};
ConfigFingerprint fingerprint(const RuntimeConfig& config);
// Throws iser::Error naming the first rank whose fingerprint differs from rank 0's and the field.
void check_fingerprints(std::span<const ConfigFingerprint> per_rank);

// Throws iser::Error naming the op and field when an op is outside the configuration.
void validate_copy_list(const RuntimeConfig& config, std::span<const CopyOp> ops);

struct RuntimeStatus {
  StatusCode code = StatusCode::kOk;
  int32_t peer = -1;
  uint64_t tag = 0;
  uint64_t fallback_routes = 0;  // routes sent back to their home slot (cumulative)
  std::string message() const;
};

// NCCL communicator: owned (created here) or borrowed from the caller.
class Communicator {
 public:
  // Rank 0 writes a fresh unique id to `path` (mode 0600, inside `path`'s directory, created
  // mode 0700 when missing and refused when group/other can enter it); other ranks wait for the
  // file (up to timeout_ms). After initialisation rank 0 removes the file (and the directory when
  // it created it).
  static Communicator from_unique_id_file(const std::string& path, int rank, int num_ranks,
                                          int timeout_ms = 60'000);
  // The unique id as hex (new_unique_id_hex()) in environment variable `var`.
  static Communicator from_env(int rank, int num_ranks, const char* var = "ISER_NCCL_UNIQUE_ID");
  // The unique id as hex, handed over by the caller (e.g. broadcast through a torch.distributed
  // group: python/iser/torch/distributed.py).
  static Communicator from_unique_id_hex(std::string_view hex, int rank, int num_ranks);
  static std::string new_unique_id_hex();
  // Borrow: the caller keeps ownership and destroys it after the runtime.
  static Communicator borrow(ncclComm* comm);

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  ncclComm* get() const { return comm_; }

 private:
  Communicator(ncclComm* comm, bool owned);
  ncclComm* comm_ = nullptr;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 0;
};

class HostStaging;  // src/runtime/host_staging.h
namespace runtime {
class PeerMemory;  // src/runtime/peer_memory.h
}

class Runtime {
 public:
  // One process per GPU on the current device. Collective over the communicator: fingerprints
  // are all-gathered and compared before any peer memory is mapped.
  Runtime(const RuntimeConfig& config, Communicator& comm);
  // All P ranks on the current device (peer pointers are plain pointers into one allocation).
  static std::unique_ptr<Runtime> logical(const RuntimeConfig& config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RuntimeConfig& config() const { return config_; }
  int first_rank() const { return first_rank_; }            // global rank of local rank 0
  int num_local_ranks() const { return num_local_ranks_; }  // 1, or P in logical mode
  bool is_logical() const { return num_local_ranks_ > 1 || comm_ == nullptr; }

  // Device pointers into local rank `local_idx`'s symmetric memory.
  void* home_bundle(int local_idx, int layer, int home_idx) const;
  void* helper_slot(int local_idx, int bank, int helper_idx) const;
  int bank_of(uint64_t generation) const {
    return static_cast<int>(generation % static_cast<uint64_t>(config_.num_banks));
  }

  // Count exchange (epoch >= 1, increasing by one per call, or kDeviceGeneration): `rows`
  // [num_local][E] int32 device (each local rank's count row), `matrix` [num_local][P][E] int32
  // device (the full matrix as each local rank sees it).
  // Each rank's epoch must be exactly the one its peers publish: a rank that finds a peer past
  // it (it ran late, after a timeout) reports kCountOvertaken instead of reading a reused row.
  void exchange_counts(const int32_t* rows, int32_t* matrix, uint64_t epoch, StreamHandle stream);
  // The count and the exchange in one launch (decode sizes: one CTA counts each rank's routes):
  // every local rank's topk ids -> its count row -> the exchange above. The outputs of
  // GpuPlanner::count() of the same ids go to `count` (GpuPlanner::count_outputs), so its
  // rewrite() / plan_rewrite*() may follow.
  struct CountInput {
    const int32_t* topk_ids = nullptr;  // [num_local][num_routes] device, -1 = none
    int num_routes = 0;                 // tau * k per rank
    int32_t* rows = nullptr;            // optional: [num_local][E] the count rows
    int32_t* tile_counts = nullptr;     // GpuPlanner::CountOutputs::tile_counts
    uint32_t* error_word = nullptr;     // GpuPlanner::CountOutputs::error_word
  };
  void count_and_exchange(const CountInput& count, int32_t* matrix, uint64_t epoch,
                          StreamHandle stream);

  // Replicate generation `generation` (>= 1, increasing by one per call, or kDeviceGeneration:
  // the rank's last generation + 1; CUDA-graph capturable) of layer `layer`'s
  // home bundles. `ops` is a device array of `num_ops` CopyOp (identical on every rank).
  // Publishes READY (even with nothing to copy). Waits first (reuse fence) until every member it
  // writes to released generation - num_banks and every writer of that generation finished.
  // `num_sms` <= 0 means config().copy_sms.
  void replicate(const CopyOp* ops, int num_ops, int layer, uint64_t generation,
                 Transport transport, StreamHandle stream, int num_sms = 0);
  // Copy-engine transport: the copy list must be on the host; owners issue cudaMemcpyAsync to
  // every member, then READY is published. The list is staged in one runtime-owned buffer: keep
  // copy-engine calls of one runtime on one stream. Explicit generations only (the host picks
  // the bank of every copy).
  void replicate_copy_engine(std::span<const CopyOp> ops, int layer, uint64_t generation,
                             StreamHandle stream);

  // READY gate: waits (acquire, up to timeout) for every writer of `ops` under `transport` (the
  // one replicate used) to publish `generation` (kDeviceGeneration: the one the rank's last
  // replicate used; stream-order the gate after that replicate), then writes `slot_expert`
  // [num_local][P*S]
  // int32 device: the expert whose replica is valid in (rank d, helper h), or -1 (no replica /
  // writer missing / failed: its routes fall back home).
  void ready_gate(const CopyOp* ops, int num_ops, uint64_t generation, int32_t* slot_expert,
                  StreamHandle stream, Transport transport = Transport::kPlan);
  // Home fallback: for local rank i, routes (expert_ids[i][n], slot_ids[i][n]) whose slot is a
  // helper slot without a valid replica of that expert go back to the expert's home slot.
  // Counts the rewritten routes in the status.
  void fallback_rewrite(const int32_t* slot_expert, const int32_t* expert_ids, int32_t* slot_ids,
                        int64_t routes_per_rank, StreamHandle stream);
  // Reuse fence: the consumer of `generation` (kDeviceGeneration: the rank's last replicate's;
  // stream-order the release after that replicate) on every local rank is done with its bank.
  void release_bank(uint64_t generation, StreamHandle stream);

  // The generation local rank `local_idx`'s last replicate published (the device counter that
  // kDeviceGeneration continues from; waits for the runtime's work like status()).
  uint64_t last_generation(int local_idx) const;
  // Local tuning of the SM copy (RuntimeConfig::copy_path / copy_warps / copy_stages; validated
  // like the configuration). Ranks may differ; takes effect with the next replicate call.
  void set_copy_shape(CopyPath path, int warps = 0, int stages = 0);
  // p2p-sami-host: the host share of the next replicate calls, in [0, config().host_share] (the
  // staging was sized for that), and the host-lane CTAs per rank (0: keep config().host_sms;
  // ranks may differ). Unlike the copy shape, every rank must use the same share (like the copy
  // list: it decides who moves which slice).
  void set_host_share(double share, int host_sms = 0);
  void set_host_path(CopyPath path);  // RuntimeConfig::host_path (local, like the copy shape)
  double host_share() const { return host_share_; }
  // Slices of every op that p2p-sami-host moves through host memory (0: none).
  int64_t host_slices() const;

  // Status of local rank `local_idx` once the runtime's work enqueued so far completed;
  // check_status throws on errors. It waits for that work only, never for the whole device: every
  // call that enqueues device work records an event on its stream, status() waits for those
  // events and then reads the status words on the runtime's own stream, so the application's
  // other streams keep running. A stream being captured into a CUDA graph records no event:
  // synchronise a graph launch (its stream) before reading the status of the work it holds.
  RuntimeStatus status(int local_idx) const;
  void check_status() const;
  // Clears the status words (code, peer, tag, fallback count) of every local rank, enqueued on
  // `stream`: ordered before the work enqueued there afterwards (nullptr: the legacy stream, and
  // the call waits for the clearing, so it precedes whatever the caller enqueues next on any
  // stream). The generation/epoch counters and the replicate kernel's completion counters are
  // left alone (the kernel keeps those consistent itself).
  void clear_status(StreamHandle stream = nullptr);

  // How peers' regions are mapped (kNccl, kIpc, or kLocal in logical mode) and, in words, why,
  // and why multicast is or is not available: "peer memory: nccl (...); multicast unavailable:
  // <reason>". The same line on every rank (the choice is collective).
  PeerMemoryMode peer_memory() const;
  const std::string& describe() const { return description_; }
  bool multicast_available() const { return multicast_available_; }

  // Bytes of one rank's symmetric region (layout identical on every rank; docs/runtime.md).
  int64_t region_bytes() const { return region_bytes_; }
  // Base of global rank r's region as mapped in this process (logical: one allocation).
  void* peer_base(int rank_idx) const;

 private:
  friend struct testing::Access;  // include/iser/testing/hooks.h: the per-rank calls below
  // Testing (logical mode only): the count exchange of local ranks [local_begin, local_end) (`rows`
  // and `matrix` still indexed by local rank from 0; fault injection and per-rank streams in
  // tests).
  void exchange_counts_ranks(int local_begin, int local_end, const int32_t* rows, int32_t* matrix,
                             uint64_t epoch, StreamHandle stream);
  // Testing (logical mode only): replicate for local ranks [local_begin, local_end) (fault
  // injection and per-rank streams in tests).
  void replicate_ranks(int local_begin, int local_end, const CopyOp* ops, int num_ops, int layer,
                       uint64_t generation, Transport transport, StreamHandle stream,
                       int num_sms = 0);
  explicit Runtime(const RuntimeConfig& config);
  void allocate(int num_local);
  void map_peers();
  void describe_peer_memory(PeerMemoryMode mode, const std::string& reason,
                            const std::string& multicast_reason);
  void map_staging();
  void check_local(int local_idx) const;
  void release() noexcept;
  // After a call enqueued device work on `stream`: records the stream's event (status()).
  void track(StreamHandle stream);
  // Local rank `local_idx`'s device scratch (status words, counters) after the tracked work.
  void read_scratch(int local_idx, void* scratch, int64_t bytes) const;
  void launch_replicate(int local_begin, int local_end, const CopyOp* ops, int num_ops, int layer,
                        uint64_t generation, Transport transport, StreamHandle stream, int num_sms);

  RuntimeConfig config_;
  ncclComm* comm_ = nullptr;
  int first_rank_ = 0;
  int num_local_ranks_ = 0;
  int64_t region_bytes_ = 0;
  // The runtime's plain device buffers (defined in runtime.cpp; owns the regions of logical ranks).
  struct DeviceMemory;
  std::unique_ptr<DeviceMemory> device_memory_;
  char* local_base_ = nullptr;     // this process's region(s) (num_local regions)
  std::vector<char*> peer_bases_;  // [P] as mapped here
  std::unique_ptr<runtime::PeerMemory> peer_memory_;  // one process per GPU: owns local_base_
  std::string description_;                           // describe()
  std::string multicast_reason_;  // why multicast is unavailable ("" = available)
  bool multicast_available_ = false;
  // Views of device_memory_'s buffers:
  void* device_peer_bases_ = nullptr;     // [P] char* on the device
  void* device_scratch_ = nullptr;        // per local rank: status, grid counters
  void* device_ce_ops_ = nullptr;         // copy-engine transport: staged copy list
  double host_share_ = 0.0;               // p2p-sami-host: current share (<= config_.host_share)
  std::unique_ptr<HostStaging> staging_;  // p2p-sami-host: pinned host staging
  // Status reads: the runtime's own stream (created at the first read) and, per stream the
  // runtime enqueued work on since the last read, an event after that work.
  mutable StreamHandle status_stream_ = nullptr;
  mutable std::vector<std::pair<StreamHandle, CUevent_st*>> tracked_;
};

// Multicast (NVLS) is allowed only where NCCL_NVLS_ENABLE is set and not "0". Returns false with
// the reason otherwise (a multicast transport would refuse to start with it).
bool multicast_allowed(std::string* reason = nullptr);

// Address arithmetic of the multicast store path (host-testable): the byte offset inside a
// group's multicast object of slice `slice_idx` of helper `helper_idx` in bank `bank`; the
// object mirrors the helper-bank part of the symmetric region.
int64_t multicast_offset(const RuntimeConfig& config, int bank, int helper_idx, int64_t slice_idx);
// Index of the aligned group [group_begin, group_begin + group_size) among all aligned groups of
// P ranks, coarse to fine (level l, group j -> 2^l - 1 + j): one multicast object each. Throws
// for groups that are not aligned.
int multicast_group_index(int num_ranks, int group_begin, int group_size);

}  // namespace iser
