// LSA peer pointers of an NCCL symmetric window, evaluated on the device where NCCL's accessors
// live (the window descriptor is device memory).
#include "cuda/lsa_peers.h"

#if ISER_NCCL_WINDOWS
#include <nccl_device.h>

namespace iser::cuda {
namespace {

struct LsaPeersConfig {
  static constexpr int kThreads = 128;
};

struct LsaPeersParams {
  ncclWindow_t window;
  int32_t num_ranks;
  char** out;
};

__global__ void __launch_bounds__(LsaPeersConfig::kThreads) lsa_peers_kernel(LsaPeersParams p) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < p.num_ranks;
       r += gridDim.x * blockDim.x) {
    p.out[r] = static_cast<char*>(ncclGetPeerPointer(p.window, 0, r));
  }
}

}  // namespace

cudaError_t launch_lsa_peer_bases(ncclWindow_t window, int num_ranks, char** out,
                                  cudaStream_t stream) {
  const LsaPeersParams p{window, num_ranks, out};
  const int blocks = (num_ranks + LsaPeersConfig::kThreads - 1) / LsaPeersConfig::kThreads;
  lsa_peers_kernel<<<blocks, LsaPeersConfig::kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace iser::cuda
#endif
