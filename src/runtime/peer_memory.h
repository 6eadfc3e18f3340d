// Peer memory of one process per GPU: this rank's symmetric region and every rank's region as
// mapped here (docs/runtime.md, "Peer memory"). map_peer_memory() resolves the request, probes,
// chooses collectively and maps: an NCCL symmetric window with LSA peer pointers
// (peer_memory_nccl.cpp) or CUDA IPC handles (peer_memory_ipc.cpp). The kernels only ever see
// the resulting peer pointers, so they copy the same bytes either way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "iser/runtime.h"
#include "runtime/peer_memory_choice.h"

struct ncclComm;

namespace iser::runtime {

class PeerMemory {
 public:
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;
  // Frees the region. NCCL: deregisters the window first, which is collective (every rank
  // destroys its runtime), and the communicator must still exist.
  virtual ~PeerMemory() = default;

  PeerMemoryMode mode() const { return mode_; }
  char* local() const { return local_; }                      // this rank's region, zeroed
  const std::vector<char*>& peers() const { return peers_; }  // [P]: rank r's region here
  const std::string& reason() const { return reason_; }       // why this mode
  void set_reason(std::string reason) { reason_ = std::move(reason); }

 protected:
  explicit PeerMemory(PeerMemoryMode mode) : mode_(mode) {}
  PeerMemoryMode mode_;
  char* local_ = nullptr;
  std::vector<char*> peers_;
  std::string reason_;
};

// Collective over `comm` (rank `rank` of `num_ranks`): allocates this rank's zeroed region of
// `bytes` (identical on every rank) and maps every rank's. `request` is RuntimeConfig's
// (ISER_PEER_MEMORY applies to kAuto). Every rank returns the same mode or throws the same
// diagnosis (a bad request, ranks asking for different modes, nccl asked for but unusable).
std::unique_ptr<PeerMemory> map_peer_memory(ncclComm* comm, int rank, int num_ranks, int64_t bytes,
                                            PeerMemoryMode request);

// Why the multicast transport is unavailable ("" = available): multicast_blocker(), then what
// NCCL reports about multimem on `comm` (asked only when nothing blocks it). This build binds no
// multimem store path, so it always gives a reason.
std::string multicast_unavailable_reason(ncclComm* comm, bool opted_in, PeerMemoryMode mode);

// The implementations (map_peer_memory calls them in this order; each is collective unless
// it says otherwise).
//
// NCCL, local step: allocates the region with ncclMemAlloc, zeroes it and checks that NCCL's
// LSA team holds every rank. nullptr with `why` where this rank cannot (or the build has no NCCL
// device API). Nothing collective happens here beyond NCCL's own lazy device-runtime set-up.
std::unique_ptr<PeerMemory> nccl_window_allocate(ncclComm* comm, int num_ranks, int64_t bytes,
                                                 std::string* why);
// NCCL, collective step (every rank's local step succeeded): registers the window
// (NCCL_WIN_COLL_SYMMETRIC) and reads every rank's LSA pointer. false with `why` on failure;
// the region then stays allocated but unregistered.
bool nccl_window_register(PeerMemory& memory, ncclComm* comm, std::string* why);
// CUDA IPC: cudaMalloc, handles all-gathered, every peer opened (P2P access checked).
std::unique_ptr<PeerMemory> ipc_map(ncclComm* comm, int rank, int num_ranks, int64_t bytes);

}  // namespace iser::runtime
