// Peer memory in an NCCL symmetric window: the region comes from ncclMemAlloc, is registered with
// ncclCommWindowRegister (NCCL_WIN_COLL_SYMMETRIC), and every rank's pointer is NCCL's LSA
// pointer of that window. One code path from one node to a multi-node NVLink domain (NVL72),
// where CUDA IPC handles do not reach. The multicast query lives here too: only NCCL knows.
#include <cstdint>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda/lsa_peers.h"
#include "iser/error.h"
#include "runtime/peer_memory.h"

#if ISER_NCCL_WINDOWS
#include <nccl_device.h>  // ncclTeamLsa (host)
#endif

namespace iser::runtime {
namespace {

std::string nccl_version_string() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION(X, Y, Z): X * 10000 + Y * 100 + Z from 2.9 on.
  return fmt::format("NCCL {}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

#if ISER_NCCL_WINDOWS

// Device memory as CUDA sees it (never faults: a pointer CUDA does not know is host memory).
bool is_device_memory(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice;
}

class NcclWindowMemory final : public PeerMemory {
 public:
  explicit NcclWindowMemory(ncclComm* comm) : PeerMemory(PeerMemoryMode::kNccl), comm_(comm) {}
  ~NcclWindowMemory() override {
    cudaDeviceSynchronize();
    if (window_ != nullptr) ncclCommWindowDeregister(comm_, window_);
    if (local_ != nullptr) ncclMemFree(local_);
  }

  void allocate(int64_t bytes) {
    void* ptr = nullptr;
    ISER_NCCL_CHECK(ncclMemAlloc(&ptr, static_cast<size_t>(bytes)));
    local_ = static_cast<char*>(ptr);
    bytes_ = bytes;
    ISER_CUDA_CHECK(cudaMemset(local_, 0, static_cast<size_t>(bytes)));
    // NOTE: zeroed before the window is registered, i.e. before any peer can reach it.
    ISER_CUDA_CHECK(cudaDeviceSynchronize());
  }

  void register_window(int num_ranks, int rank) {
    ISER_NCCL_CHECK(ncclCommWindowRegister(comm_, local_, static_cast<size_t>(bytes_), &window_,
                                           NCCL_WIN_COLL_SYMMETRIC));
    // NOTE: where the communicator has no symmetric-memory support, NCCL 2.28 succeeds but
    // returns its local registration handle (host memory) instead of a device window; a kernel
    // reading it faults and poisons the context for good. Only device memory is a window
    // (ncclCommQueryProperties, from NCCL 2.29, would tell up front).
    ISER_CHECK(is_device_memory(window_),
               "NCCL returned a local registration, not a symmetric window (this communicator "
               "has no symmetric memory support: CUDA P2P between all ranks, NCCL_CUMEM_ENABLE, "
               "NCCL_WIN_ENABLE)");
    char** device = nullptr;
    ISER_CUDA_CHECK(cudaMalloc(&device, sizeof(char*) * num_ranks));
    cudaError_t err = cuda::launch_lsa_peer_bases(window_, num_ranks, device, nullptr);
    if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
    peers_.assign(num_ranks, nullptr);
    if (err == cudaSuccess) {
      err = cudaMemcpy(peers_.data(), device, sizeof(char*) * num_ranks, cudaMemcpyDeviceToHost);
    }
    cudaFree(device);
    ISER_CUDA_CHECK(err);
    for (int r = 0; r < num_ranks; ++r) {
      ISER_CHECK(is_device_memory(peers_[r]),
                 "NCCL window: the LSA pointer of rank {} ({}) is not device memory", r,
                 static_cast<const void*>(peers_[r]));
    }
    // This rank's LSA pointer must reach this rank's region: a word written through the local
    // pointer is read back through it. Nothing else touches the region before set-up ends.
    const uint64_t cookie = 0x6973657277696e64ull ^ static_cast<uint64_t>(rank);
    uint64_t seen = 0;
    ISER_CUDA_CHECK(cudaMemcpy(local_, &cookie, sizeof(cookie), cudaMemcpyHostToDevice));
    ISER_CUDA_CHECK(cudaMemcpy(&seen, peers_[rank], sizeof(seen), cudaMemcpyDeviceToHost));
    ISER_CUDA_CHECK(cudaMemset(local_, 0, sizeof(cookie)));
    ISER_CUDA_CHECK(cudaDeviceSynchronize());
    ISER_CHECK(seen == cookie,
               "NCCL window: rank {}'s LSA pointer does not reach its own region (read {:#x}, "
               "wrote {:#x})",
               rank, seen, cookie);
  }

 private:
  ncclComm* comm_;
  ncclWindow_t window_ = nullptr;
  int64_t bytes_ = 0;
};

#endif  // ISER_NCCL_WINDOWS

}  // namespace

std::unique_ptr<PeerMemory> nccl_window_allocate(ncclComm* comm, int num_ranks, int64_t bytes,
                                                 std::string* why) {
#if ISER_NCCL_WINDOWS
  // NOTE: ncclTeamLsa sets up NCCL's device runtime on first use and returns an empty team when
  // that fails; it asks for no multimem (only ncclDevCommCreate with lsaMultimem would).
  const ncclTeam_t lsa = ncclTeamLsa(comm);
  if (lsa.nRanks == 0) {
    *why = fmt::format(
        "{}: the device runtime (symmetric memory) did not initialise "
        "(NCCL_CUMEM_ENABLE=0?)",
        nccl_version_string());
    return nullptr;
  }
  if (lsa.nRanks != num_ranks) {
    *why = fmt::format(
        "{}: the LSA team holds {} of the {} ranks (the others are not "
        "load/store reachable from here)",
        nccl_version_string(), lsa.nRanks, num_ranks);
    return nullptr;
  }
  auto memory = std::make_unique<NcclWindowMemory>(comm);
  try {
    memory->allocate(bytes);
  } catch (const Error& e) {
    *why = fmt::format("ncclMemAlloc of {} bytes: {}", bytes, e.what());
    return nullptr;
  }
  memory->set_reason(fmt::format("{}, LSA team of {} rank(s)", nccl_version_string(), lsa.nRanks));
  return memory;
#else
  (void)comm;
  (void)num_ranks;
  (void)bytes;
  *why = fmt::format(
      "built against {} without symmetric windows / device API headers "
      "(NCCL >= 2.28 needed)",
      nccl_version_string());
  return nullptr;
#endif
}

bool nccl_window_register(PeerMemory& memory, ncclComm* comm, std::string* why) {
#if ISER_NCCL_WINDOWS
  auto* window = dynamic_cast<NcclWindowMemory*>(&memory);
  ISER_CHECK(window != nullptr, "NCCL window: peer memory of mode '{}'", to_string(memory.mode()));
  int num_ranks = 0;
  int rank = 0;
  ISER_NCCL_CHECK(ncclCommCount(comm, &num_ranks));
  ISER_NCCL_CHECK(ncclCommUserRank(comm, &rank));
  try {
    window->register_window(num_ranks, rank);
  } catch (const Error& e) {
    *why = fmt::format("window registration: {}", e.what());
    return false;
  }
  return true;
#else
  (void)memory;
  (void)comm;
  *why = "built without NCCL symmetric windows";
  return false;
#endif
}

std::string multicast_unavailable_reason(ncclComm* comm, bool opted_in, PeerMemoryMode mode) {
  std::string reason = multicast_blocker(opted_in, mode);
  if (!reason.empty()) return reason;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  // NOTE: untested (the lent machines run NCCL 2.28 with NCCL_NVLS_ENABLE=0, where this is never
  // reached). A query only: nothing here requests multimem or creates a multicast object.
  ncclCommProperties_t properties = NCCL_COMM_PROPERTIES_INITIALIZER;
  ISER_NCCL_CHECK(ncclCommQueryProperties(comm, &properties));
  if (!properties.multimemSupport) {
    return fmt::format("{} reports no multimem support on this communicator",
                       nccl_version_string());
  }
  return fmt::format(
      "{} reports multimem support, but this build binds no multimem store "
      "path to NCCL's multimem pointers",
      nccl_version_string());
#else
  (void)comm;
  return fmt::format(
      "{} cannot report multimem support without requesting it "
      "(ncclCommQueryProperties needs NCCL >= 2.29)",
      nccl_version_string());
#endif
}

}  // namespace iser::runtime
