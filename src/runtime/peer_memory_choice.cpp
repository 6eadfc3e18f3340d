// CUDA-free half of the peer-memory set-up (src/runtime/peer_memory_choice.h): mode names, the
// ISER_PEER_MEMORY override, the collective choice and the multicast preconditions.
#include "runtime/peer_memory_choice.h"

#include <algorithm>
#include <cstring>

#include "iser/error.h"

namespace iser {

std::string_view to_string(PeerMemoryMode mode) {
  switch (mode) {
    case PeerMemoryMode::kAuto:
      return "auto";
    case PeerMemoryMode::kNccl:
      return "nccl";
    case PeerMemoryMode::kIpc:
      return "ipc";
    case PeerMemoryMode::kLocal:
      return "local";
  }
  return "?";
}

PeerMemoryMode peer_memory_from_string(std::string_view name) {
  for (PeerMemoryMode m : {PeerMemoryMode::kAuto, PeerMemoryMode::kNccl, PeerMemoryMode::kIpc}) {
    if (name == to_string(m)) return m;
  }
  throw Error(fmt::format("peer memory: unknown value '{}' (auto, nccl, ipc)", name));
}

namespace runtime {

void set_probe_reason(PeerMemoryProbe& probe, std::string_view text) {
  const size_t n = std::min(text.size(), sizeof(probe.reason) - 1);
  std::memcpy(probe.reason, text.data(), n);
  probe.reason[n] = '\0';
}

// NOTE: the reason was written by another process; never read past the array.
std::string_view probe_reason(const PeerMemoryProbe& probe) {
  return {probe.reason, strnlen(probe.reason, sizeof(probe.reason))};
}

PeerMemoryMode resolve_peer_memory_request(PeerMemoryMode config, const char* env) {
  ISER_CHECK(config == PeerMemoryMode::kAuto || config == PeerMemoryMode::kNccl ||
                 config == PeerMemoryMode::kIpc,
             "runtime config: peer_memory = {} is not a request (auto, nccl, ipc)",
             to_string(config));
  if (config != PeerMemoryMode::kAuto || env == nullptr || env[0] == '\0') return config;
  try {
    return peer_memory_from_string(env);
  } catch (const Error&) {
    throw Error(
        fmt::format("{}={}: not a peer memory mode (auto, nccl, ipc)", kPeerMemoryEnv, env));
  }
}

PeerMemoryMode common_peer_memory_request(std::span<const PeerMemoryProbe> probes) {
  ISER_CHECK(!probes.empty(), "peer memory: no ranks");
  for (size_t r = 0; r < probes.size(); ++r) {
    const int32_t q = probes[r].request;
    ISER_CHECK(q == static_cast<int32_t>(PeerMemoryMode::kAuto) ||
                   q == static_cast<int32_t>(PeerMemoryMode::kNccl) ||
                   q == static_cast<int32_t>(PeerMemoryMode::kIpc),
               "runtime set-up: rank {} rejected its peer memory request: {}", r,
               probe_reason(probes[r]));
  }
  const auto request = static_cast<PeerMemoryMode>(probes[0].request);
  for (size_t r = 1; r < probes.size(); ++r) {
    ISER_CHECK(probes[r].request == probes[0].request,
               "runtime set-up: rank {} asks for peer memory '{}' but rank 0 for '{}' (every rank "
               "must ask for the same; RuntimeConfig::peer_memory or {})",
               r, to_string(static_cast<PeerMemoryMode>(probes[r].request)), to_string(request),
               kPeerMemoryEnv);
  }
  return request;
}

PeerMemoryChoice choose_peer_memory(std::span<const PeerMemoryProbe> probes) {
  const PeerMemoryMode request = common_peer_memory_request(probes);
  if (request == PeerMemoryMode::kIpc) return {PeerMemoryMode::kIpc, "CUDA IPC handles, as asked"};
  for (size_t r = 0; r < probes.size(); ++r) {
    if (probes[r].nccl_usable) continue;
    const std::string_view why = probe_reason(probes[r]);
    ISER_CHECK(request != PeerMemoryMode::kNccl,
               "runtime set-up: peer memory 'nccl' asked for, but rank {} cannot use an NCCL "
               "window: {}",
               r, why);
    return {PeerMemoryMode::kIpc, fmt::format("CUDA IPC handles: rank {} cannot use an NCCL "
                                              "window: {}",
                                              r, why)};
  }
  return {PeerMemoryMode::kNccl, request == PeerMemoryMode::kNccl
                                     ? "NCCL symmetric window, LSA peer pointers, as asked"
                                     : "NCCL symmetric window, LSA peer pointers"};
}

std::string multicast_blocker(bool opted_in, PeerMemoryMode mode) {
  std::string reason;
  if (!multicast_allowed(&reason)) return reason;
  if (!opted_in) return "not asked for (RuntimeConfig::multicast is off)";
  if (mode != PeerMemoryMode::kNccl) {
    return fmt::format(
        "needs NCCL peer memory (multimem pointers of an NCCL window); this "
        "runtime uses '{}'",
        to_string(mode));
  }
  return {};
}

std::string describe_peer_memory(PeerMemoryMode mode, std::string_view reason,
                                 bool multicast_available, std::string_view multicast_reason) {
  return fmt::format("peer memory: {} ({}); multicast {}{}{}", to_string(mode), reason,
                     multicast_available ? "available" : "unavailable",
                     multicast_reason.empty() ? "" : ": ", multicast_reason);
}

}  // namespace runtime
}  // namespace iser
