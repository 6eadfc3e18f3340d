// The choice of peer memory and the multicast preconditions (docs/runtime.md, "Peer memory"):
// CUDA- and NCCL-free (src/core/peer_memory_choice.cpp) so the CPU tests cover every branch.
// src/runtime/peer_memory.cpp gathers one PeerMemoryProbe per rank and acts on the choice.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "iser/runtime.h"

namespace iser::runtime {

// Environment variable that overrides RuntimeConfig::peer_memory = kAuto ("auto", "nccl", "ipc").
inline constexpr const char* kPeerMemoryEnv = "ISER_PEER_MEMORY";

// What one rank reports before the choice (all-gathered over NCCL, so trivially copyable).
struct PeerMemoryProbe {
  int32_t request = 0;      // PeerMemoryMode: kAuto, kNccl or kIpc
  int32_t nccl_usable = 0;  // 1: this rank can register an NCCL window reaching every rank
  char reason[232] = {};    // why not (nccl_usable == 0), NUL-terminated
};
static_assert(sizeof(PeerMemoryProbe) == 240);

// Copies `text` into probe.reason (truncated to fit, always NUL-terminated); reads it back.
void set_probe_reason(PeerMemoryProbe& probe, std::string_view text);
std::string_view probe_reason(const PeerMemoryProbe& probe);

struct PeerMemoryChoice {
  PeerMemoryMode mode = PeerMemoryMode::kIpc;
  std::string reason;  // why this mode, in words
};

// A rank's request: `config` unless it is kAuto and `env` (ISER_PEER_MEMORY's value, may be
// null or empty) names a mode. Throws iser::Error naming the variable and the value otherwise.
PeerMemoryMode resolve_peer_memory_request(PeerMemoryMode config, const char* env);

// The request every rank made (probe index = rank). Throws iser::Error naming the rank when a
// rank could not resolve its request (request < 0, reason given) or ranks ask for different ones.
PeerMemoryMode common_peer_memory_request(std::span<const PeerMemoryProbe> probes);

// The collective choice from every rank's probe (index = rank). Throws iser::Error, naming the
// rank, when ranks ask for different modes or when kNccl is asked for and a rank cannot use it.
// kIpc when every rank asked for it; kNccl when every rank can use it; otherwise (kAuto) kIpc,
// with the first rank's reason.
PeerMemoryChoice choose_peer_memory(std::span<const PeerMemoryProbe> probes);

// Why the multicast transport cannot be used before NCCL is asked anything: NCCL_NVLS_ENABLE
// (multicast_allowed), the user's opt-in, and the peer memory (only an NCCL window has multimem
// pointers). Empty when NCCL may be asked whether it supports multimem.
std::string multicast_blocker(bool opted_in, PeerMemoryMode mode);

// The report line of Runtime::describe(): "peer memory: <mode> (<reason>); multicast
// unavailable: <reason>" (or "multicast available").
std::string describe_peer_memory(PeerMemoryMode mode, std::string_view reason,
                                 bool multicast_available, std::string_view multicast_reason);

}  // namespace iser::runtime
