// CUDA-free half of the runtime API (include/iser/runtime.h): configuration, bundle layout,
// fingerprints, copy-list checks, the multicast guard and its address arithmetic. Built in every
// build (CPU builds too: the CPU tests check it).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cuda/host_lane.h"
#include "iser/error.h"
#include "iser/runtime.h"

namespace iser {
namespace {

int64_t align_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

int64_t BundleLayout::scale_offset() const {
  return align_up(weight_bytes, kBundleAlignment);
}
int64_t BundleLayout::bytes() const {
  return scale_offset() + scale_bytes;
}
int64_t BundleLayout::slot_stride() const {
  return align_up(bytes(), kSlotAlignment);
}

void BundleLayout::validate() const {
  ISER_CHECK(weight_bytes > 0 && weight_bytes % 16 == 0,
             "bundle: weight_bytes = {} must be a positive multiple of 16", weight_bytes);
  ISER_CHECK(scale_bytes >= 0 && scale_bytes % 16 == 0,
             "bundle: scale_bytes = {} must be a non-negative multiple of 16", scale_bytes);
  ISER_CHECK(bytes() <= (int64_t{1} << 40), "bundle: {} bytes is too large", bytes());
}

std::string_view to_string(Transport transport) {
  switch (transport) {
    case Transport::kP2PDirect:
      return "p2p-direct";
    case Transport::kP2PSami:
      return "p2p-sami";
    case Transport::kCopyEngine:
      return "copy-engine";
    case Transport::kPlan:
      return "plan";
    case Transport::kP2PSamiOwner:
      return "p2p-sami-owner";
    case Transport::kP2PSamiHost:
      return "p2p-sami-host";
  }
  return "?";
}

std::string_view to_string(CopyPath path) {
  return path == CopyPath::kBulk ? "bulk" : "registers";
}

Transport transport_from_string(std::string_view name) {
  for (Transport t : {Transport::kP2PDirect, Transport::kP2PSami, Transport::kP2PSamiOwner,
                      Transport::kP2PSamiHost, Transport::kCopyEngine, Transport::kPlan}) {
    if (name == to_string(t)) return t;
  }
  ISER_CHECK(name != "multicast",
             "transport 'multicast' is not offered: this build binds no NVLink multicast objects "
             "(use p2p-direct, p2p-sami, p2p-sami-owner, p2p-sami-host, copy-engine or plan)");
  throw Error(fmt::format(
      "transport: unknown value '{}' (p2p-direct, p2p-sami, p2p-sami-owner, p2p-sami-host, "
      "copy-engine, plan)",
      name));
}

void RuntimeConfig::validate() const {
  ISER_CHECK(num_ranks >= 1 && num_ranks <= 1024, "runtime config: num_ranks = {} not in [1, 1024]",
             num_ranks);
  ISER_CHECK(num_experts > 0 && num_experts % num_ranks == 0,
             "runtime config: num_experts = {} must be a positive multiple of num_ranks = {}",
             num_experts, num_ranks);
  ISER_CHECK(num_slots >= 0 && num_slots <= 64, "runtime config: num_slots = {} not in [0, 64]",
             num_slots);
  ISER_CHECK(num_layers >= 1, "runtime config: num_layers = {} must be >= 1", num_layers);
  ISER_CHECK(num_banks == 1 || num_banks == 2, "runtime config: num_banks = {} must be 1 or 2",
             num_banks);
  ISER_CHECK(copy_sms >= 1 && copy_sms <= 132, "runtime config: copy_sms = {} not in [1, 132]",
             copy_sms);
  ISER_CHECK(copy_path == CopyPath::kBulk || copy_path == CopyPath::kRegisters,
             "runtime config: copy_path = {} is not a copy path", static_cast<int>(copy_path));
  ISER_CHECK(host_path == CopyPath::kBulk || host_path == CopyPath::kRegisters,
             "runtime config: host_path = {} is not a copy path", static_cast<int>(host_path));
  ISER_CHECK(copy_warps >= 0 && copy_warps <= 16, "runtime config: copy_warps = {} not in [0, 16]",
             copy_warps);
  ISER_CHECK(copy_stages >= 0 && copy_stages <= kMaxCopyStagesPerCta,
             "runtime config: copy_stages = {} not in [0, {}]", copy_stages, kMaxCopyStagesPerCta);
  ISER_CHECK(copy_path != CopyPath::kBulk ||
                 std::max(copy_warps, 1) * std::max(copy_stages, 1) <= kMaxCopyStagesPerCta,
             "runtime config: copy_warps x copy_stages = {} x {} exceeds {} shared-memory stages "
             "per CTA",
             copy_warps, copy_stages, kMaxCopyStagesPerCta);
  ISER_CHECK(timeout_us > 0, "runtime config: timeout_us = {} must be positive", timeout_us);
  ISER_CHECK(host_share >= 0.0 && host_share <= 1.0,
             "runtime config: host_share = {} not in [0, 1]", host_share);
  ISER_CHECK(host_sms >= 1 && host_sms <= 64, "runtime config: host_sms = {} not in [1, 64]",
             host_sms);
  ISER_CHECK(peer_memory == PeerMemoryMode::kAuto || peer_memory == PeerMemoryMode::kNccl ||
                 peer_memory == PeerMemoryMode::kIpc,
             "runtime config: peer_memory = {} is not a request (auto, nccl, ipc)",
             static_cast<int>(peer_memory));
  bundle.validate();
}

ConfigFingerprint fingerprint(const RuntimeConfig& config) {
  ConfigFingerprint f;
  f.version = kRuntimeVersion;
  f.num_ranks = config.num_ranks;
  f.num_experts = config.num_experts;
  f.num_slots = config.num_slots;
  f.num_layers = config.num_layers;
  f.num_banks = config.num_banks;
  f.weight_bytes = config.bundle.weight_bytes;
  f.scale_bytes = config.bundle.scale_bytes;
  f.host_slices = runtime::host_lane_slices(config.bundle.num_slices(), config.host_share);
  return f;
}

void check_fingerprints(std::span<const ConfigFingerprint> per_rank) {
  if (per_rank.empty()) return;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    ISER_CHECK(per_rank[r].version >= 0,
               "runtime set-up: rank {} rejected its own configuration (see that rank's error); "
               "refusing to map peer memory",
               r);
  }
  const ConfigFingerprint& ref = per_rank[0];
  for (size_t r = 1; r < per_rank.size(); ++r) {
    const ConfigFingerprint& f = per_rank[r];
    auto field = [&](const char* name, int64_t mine, int64_t theirs) {
      ISER_CHECK(mine == theirs,
                 "runtime set-up: rank {} presents {} = {} but rank 0 presents {}; refusing to map "
                 "peer memory",
                 r, name, theirs, mine);
    };
    field("version", ref.version, f.version);
    field("num_ranks (P)", ref.num_ranks, f.num_ranks);
    field("num_experts (E)", ref.num_experts, f.num_experts);
    field("num_slots (S)", ref.num_slots, f.num_slots);
    field("num_layers", ref.num_layers, f.num_layers);
    field("num_banks", ref.num_banks, f.num_banks);
    field("bundle weight_bytes", ref.weight_bytes, f.weight_bytes);
    field("bundle scale_bytes", ref.scale_bytes, f.scale_bytes);
    field("host-lane slices (host_share)", ref.host_slices, f.host_slices);
  }
}

void validate_copy_list(const RuntimeConfig& config, std::span<const CopyOp> ops) {
  const int h = config.experts_per_rank();
  ISER_CHECK(ops.size() <= static_cast<size_t>(kMaxLocalCopyOps),
             "copy list: {} ops exceed the limit {}", ops.size(), kMaxLocalCopyOps);
  std::vector<char> used(static_cast<size_t>(config.num_ranks) * (config.num_slots + 1), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const CopyOp& op = ops[i];
    ISER_CHECK(op.expert >= 0 && op.expert < config.num_experts,
               "copy list: op {} expert = {} not in [0, {})", i, op.expert, config.num_experts);
    ISER_CHECK(op.owner == op.expert / h, "copy list: op {} owner = {} but expert {} lives on {}",
               i, op.owner, op.expert, op.expert / h);
    ISER_CHECK(op.group_size >= 1 && op.group_begin >= 0 &&
                   op.group_begin + op.group_size <= config.num_ranks,
               "copy list: op {} group [{}, {}) outside [0, {})", i, op.group_begin,
               op.group_begin + op.group_size, config.num_ranks);
    ISER_CHECK(op.helper >= 0 && op.helper < config.num_slots,
               "copy list: op {} helper = {} not in [0, {})", i, op.helper, config.num_slots);
    ISER_CHECK(op.mode == TransportMode::kOwnerDirect || op.mode == TransportMode::kSami ||
                   op.mode == TransportMode::kSamiOwner,
               "copy list: op {} mode = {} (0 owner-direct, 1 SAMI, 3 owner-assisted SAMI)", i,
               static_cast<int32_t>(op.mode));
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      char& u = used[static_cast<size_t>(m) * config.num_slots + op.helper];
      ISER_CHECK(!u, "copy list: op {} reuses helper {} of rank {}", i, op.helper, m);
      u = 1;
    }
  }
}

std::string RuntimeStatus::message() const {
  switch (code) {
    case StatusCode::kOk:
      return fmt::format("ok ({} routes fell back to home slots)", fallback_routes);
    case StatusCode::kCountTimeout:
      return fmt::format("count exchange timed out: rank {} never published epoch {}", peer, tag);
    case StatusCode::kReadyTimeout:
      return fmt::format("READY gate timed out: writer rank {} never published generation {}", peer,
                         tag);
    case StatusCode::kFenceTimeout:
      return fmt::format(
          "reuse fence timed out before generation {}: rank {} never released the bank or never "
          "finished writing it",
          tag, peer);
    case StatusCode::kCopyFailed:
      return fmt::format("replication failed: writer rank {} published generation {} as failed",
                         peer, tag);
    case StatusCode::kReadyOvertaken:
      return fmt::format("READY gate ran late: writer rank {} is already past generation {}", peer,
                         tag);
    case StatusCode::kHostLaneTimeout:
      return fmt::format(
          "host lane: owner rank {} never staged generation {} (or staged it as failed); this "
          "member published it as failed",
          peer, tag);
    case StatusCode::kCountOvertaken:
      return fmt::format(
          "count exchange ran late: rank {} is already past epoch {} (this rank's matrix is not "
          "that epoch's)",
          peer, tag);
    case StatusCode::kGateEarly:
      return fmt::format(
          "READY gate or bank release with kDeviceGeneration ran before its replicate: generation "
          "{} was already gated or released (nothing validated or released)",
          tag);
  }
  return "unknown status";
}

bool multicast_allowed(std::string* reason) {
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::strcmp(nvls, "0") == 0 || nvls[0] == '\0') {
    if (reason) {
      *reason = nvls && std::strcmp(nvls, "0") == 0
                    ? "multicast transport refused: NCCL_NVLS_ENABLE=0 forbids creating NVLink "
                      "multicast objects on this machine"
                    : "multicast transport refused: set NCCL_NVLS_ENABLE=1 to allow NVLink "
                      "multicast objects (unset counts as forbidden)";
    }
    return false;
  }
  return true;
}

int64_t multicast_offset(const RuntimeConfig& config, int bank, int helper_idx, int64_t slice_idx) {
  ISER_CHECK(bank >= 0 && bank < config.num_banks, "multicast: bank = {} not in [0, {})", bank,
             config.num_banks);
  ISER_CHECK(helper_idx >= 0 && helper_idx < config.num_slots,
             "multicast: helper = {} not in [0, {})", helper_idx, config.num_slots);
  ISER_CHECK(slice_idx >= 0 && slice_idx < config.bundle.num_slices(),
             "multicast: slice = {} not in [0, {})", slice_idx, config.bundle.num_slices());
  return (static_cast<int64_t>(bank) * config.num_slots + helper_idx) *
             config.bundle.slot_stride() +
         slice_idx * kSliceBytes;
}

int multicast_group_index(int num_ranks, int group_begin, int group_size) {
  ISER_CHECK(group_size >= 1 && num_ranks % group_size == 0 && group_begin % group_size == 0 &&
                 group_begin >= 0 && group_begin + group_size <= num_ranks,
             "multicast: group [{}, {}) of {} ranks is not aligned", group_begin,
             group_begin + group_size, num_ranks);
  const int num_groups = num_ranks / group_size;
  ISER_CHECK((num_groups & (num_groups - 1)) == 0,
             "multicast: {} groups of {} ranks is not a power-of-two split", num_groups,
             group_size);
  return num_groups - 1 + group_begin / group_size;
}

}  // namespace iser
