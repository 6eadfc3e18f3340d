// map_peer_memory: the collective choice between an NCCL window and CUDA IPC handles.
// NOTE: every step that can fail on one rank only is followed by an all-gather of its outcome,
// and every rank then acts on the same gathered facts, so a failure on one rank becomes the
// same decision (fall back, or the same error) on every rank instead of a hang in a collective.
#include "runtime/peer_memory.h"

#include <cstdlib>

#include <cuda_runtime.h>
#include <nccl.h>

#include "iser/error.h"
#include "runtime/all_gather.h"

namespace iser::runtime {

std::unique_ptr<PeerMemory> map_peer_memory(ncclComm* comm, int rank, int num_ranks, int64_t bytes,
                                            PeerMemoryMode request) {
  // 1. Requests: resolved locally (ISER_PEER_MEMORY), compared before anything is allocated.
  PeerMemoryProbe mine;
  try {
    mine.request =
        static_cast<int32_t>(resolve_peer_memory_request(request, std::getenv(kPeerMemoryEnv)));
  } catch (const Error& e) {
    mine.request = -1;
    set_probe_reason(mine, e.what());
  }
  std::vector<PeerMemoryProbe> probes = all_gather(comm, mine, num_ranks);
  const PeerMemoryMode asked = common_peer_memory_request(probes);  // throws on bad / different

  // 2. Can every rank use an NCCL window? (local: allocation and LSA team)
  std::unique_ptr<PeerMemory> window;
  if (asked != PeerMemoryMode::kIpc) {
    std::string why;
    window = nccl_window_allocate(comm, num_ranks, bytes, &why);
    mine.nccl_usable = window != nullptr;
    set_probe_reason(mine, why);
    probes = all_gather(comm, mine, num_ranks);
  }
  PeerMemoryChoice choice = choose_peer_memory(probes);  // throws: nccl asked for, a rank cannot

  // 3. Register (collective), then agree on the outcome.
  if (choice.mode == PeerMemoryMode::kNccl) {
    std::string why;
    mine.nccl_usable = nccl_window_register(*window, comm, &why);
    set_probe_reason(mine, why);
    probes = all_gather(comm, mine, num_ranks);
    choice = choose_peer_memory(probes);
  }
  if (choice.mode == PeerMemoryMode::kNccl) {
    window->set_reason(fmt::format("{}; {}", choice.reason, window->reason()));
    return window;
  }
  window.reset();  // before the IPC region is allocated: never both at once
  std::unique_ptr<PeerMemory> ipc = ipc_map(comm, rank, num_ranks, bytes);
  ipc->set_reason(choice.reason);
  return ipc;
}

}  // namespace iser::runtime
