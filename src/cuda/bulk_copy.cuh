// Hopper (sm_90) bulk-copy primitives: mbarriers and the TMA's non-tensor cp.async.bulk between
// global and shared memory. Used by the replication kernel's bulk path (replicate.cuh).
#pragma once

#include <cstdint>

#include "cuda/launch_check.h"

namespace iser::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals)
               : "memory");
}

// NOTE: makes initialised mbarriers visible to the async proxy (the TMA completes transactions
// on them) before the first bulk copy names them.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
}

// Waits until the phase with parity `parity` of `bar` completed (its bytes have landed).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// Global (local or peer-mapped) -> shared; completes `bytes` transactions on `bar`.
__device__ __forceinline__ void bulk_load(void* shared_dst, const void* global_src, uint32_t bytes,
                                          uint64_t* bar) {
  // cp.async.bulk: size and both addresses multiples of 16.
  ISER_DEVICE_ASSERT(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(global_src) % 16 == 0 &&
                     shared_address(shared_dst) % 16 == 0);
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(shared_dst)),
      "l"(global_src), "r"(bytes), "r"(shared_address(bar))
      : "memory");
}

// Shared -> global (local or peer-mapped), tracked by the issuing thread's bulk async-groups.
__device__ __forceinline__ void bulk_store(void* global_dst, const void* shared_src,
                                           uint32_t bytes) {
  ISER_DEVICE_ASSERT(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(global_dst) % 16 == 0 &&
                     shared_address(shared_src) % 16 == 0);
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(global_dst),
               "r"(shared_address(shared_src)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most `pending` of this thread's most recent bulk groups still read shared
// memory (the immediate must be a constant, hence the switch).
__device__ __forceinline__ void bulk_wait_read(int pending) {
  switch (pending) {
    case 0:
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      break;
    case 1:
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      break;
    case 2:
      asm volatile("cp.async.bulk.wait_group.read 2;" ::: "memory");
      break;
    case 3:
      asm volatile("cp.async.bulk.wait_group.read 3;" ::: "memory");
      break;
    case 4:
      asm volatile("cp.async.bulk.wait_group.read 4;" ::: "memory");
      break;
    case 5:
      asm volatile("cp.async.bulk.wait_group.read 5;" ::: "memory");
      break;
    case 6:
      asm volatile("cp.async.bulk.wait_group.read 6;" ::: "memory");
      break;
    default:
      asm volatile("cp.async.bulk.wait_group.read 7;" ::: "memory");
      break;
  }
}

// Waits until at most `kPending` of this thread's most recent bulk groups are incomplete: the
// writes of every older group were performed (not only their shared-memory reads).
template <int kPending>
__device__ __forceinline__ void bulk_wait_writes() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

// Orders this thread's generic-proxy and async-proxy accesses of global memory (either way).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// NOTE: waits until every bulk group of this thread completed, i.e. its writes were performed;
// the proxy fence then orders them (async proxy) before this thread's later generic-proxy
// operations, so the READY release that follows is cumulative over them.
__device__ __forceinline__ void bulk_wait_all_writes() {
  bulk_wait_writes<0>();
  fence_proxy_async_global();
}

// Orders this thread's generic-proxy reads of shared memory before later bulk copies into it.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace iser::cuda
