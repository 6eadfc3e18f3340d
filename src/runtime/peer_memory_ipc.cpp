// Peer memory through CUDA IPC handles: the fallback where NCCL has no symmetric windows (older
// than 2.28) or a window cannot be registered. One node only (IPC handles do not cross hosts).
#include <cuda_runtime.h>
#include <nccl.h>

#include "iser/error.h"
#include "runtime/all_gather.h"
#include "runtime/peer_memory.h"

namespace iser::runtime {
namespace {

struct IpcRecord {
  cudaIpcMemHandle_t handle;
  int32_t device;
};

class IpcMemory final : public PeerMemory {
 public:
  IpcMemory() : PeerMemory(PeerMemoryMode::kIpc) {}
  ~IpcMemory() override {
    for (char* p : opened_) cudaIpcCloseMemHandle(p);
    cudaFree(local_);
  }

  void map(ncclComm* comm, int rank, int num_ranks, int64_t bytes) {
    ISER_CUDA_CHECK(cudaMalloc(&local_, static_cast<size_t>(bytes)));
    ISER_CUDA_CHECK(cudaMemset(local_, 0, static_cast<size_t>(bytes)));
    // NOTE: the zeroed control words exist before any peer learns where they are (the handles).
    ISER_CUDA_CHECK(cudaDeviceSynchronize());
    IpcRecord record{};
    ISER_CUDA_CHECK(cudaIpcGetMemHandle(&record.handle, local_));
    ISER_CUDA_CHECK(cudaGetDevice(&record.device));
    const std::vector<IpcRecord> records = all_gather(comm, record, num_ranks);
    peers_.assign(num_ranks, nullptr);
    for (int r = 0; r < num_ranks; ++r) {
      if (r == rank) {
        peers_[r] = local_;
        continue;
      }
      int can_access = 0;
      ISER_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, record.device, records[r].device));
      ISER_CHECK(can_access,
                 "runtime set-up: device {} (rank {}) cannot access device {} (rank {}) over P2P",
                 record.device, rank, records[r].device, r);
      void* mapped = nullptr;
      ISER_CUDA_CHECK(
          cudaIpcOpenMemHandle(&mapped, records[r].handle, cudaIpcMemLazyEnablePeerAccess));
      peers_[r] = static_cast<char*>(mapped);
      opened_.push_back(peers_[r]);
    }
  }

 private:
  std::vector<char*> opened_;  // IPC mappings to close
};

}  // namespace

std::unique_ptr<PeerMemory> ipc_map(ncclComm* comm, int rank, int num_ranks, int64_t bytes) {
  auto memory = std::make_unique<IpcMemory>();
  memory->map(comm, rank, num_ranks, bytes);
  return memory;
}

}  // namespace iser::runtime
