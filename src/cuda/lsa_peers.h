// Peer pointers of an NCCL symmetric window (src/runtime/peer_memory_nccl.cpp): host-side launch
// helper of the kernel that evaluates NCCL's device-side LSA accessor for every rank.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

// NCCL symmetric windows and the device API (LSA pointers) exist from NCCL 2.28; older NCCL, or
// an installation without its device headers, builds the CUDA IPC path only.
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && \
    __has_include(<nccl_device.h>)
#define ISER_NCCL_WINDOWS 1
#else
#define ISER_NCCL_WINDOWS 0
#endif

#if ISER_NCCL_WINDOWS
namespace iser::cuda {

// out[r] = the load/store pointer of world rank r's window base (ncclGetPeerPointer), for r in
// [0, num_ranks); every rank must be in this rank's LSA team. `out` is a device array.
cudaError_t launch_lsa_peer_bases(ncclWindow_t window, int num_ranks, char** out,
                                  cudaStream_t stream);

}  // namespace iser::cuda
#endif
