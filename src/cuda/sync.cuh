// Memory-ordering primitives shared by the runtime kernels (system scope: peers are other GPUs).
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace iser::cuda {

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// NOTE: st.release.sys is cumulative: every write this thread observed (its own, and those of
// its CTA ordered before it by bar.sync) is visible to a reader whose ld.acquire.sys sees `value`.
__device__ __forceinline__ void store_release_sys(uint64_t* ptr, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}

__device__ __forceinline__ uint64_t load_acquire_sys(const uint64_t* ptr) {
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
  return value;
}

__device__ __forceinline__ void fence_acq_rel_sys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// Spin until *flag >= target (acquire) or the deadline passes. Returns the last value read.
__device__ __forceinline__ uint64_t wait_at_least(const uint64_t* flag, uint64_t target,
                                                  uint64_t deadline_ns) {
  uint64_t value = load_acquire_sys(flag);
  while (value < target) {
    if (globaltimer_ns() > deadline_ns) break;
    __nanosleep(64);
    value = load_acquire_sys(flag);
  }
  return value;
}

__device__ __forceinline__ void report(Scratch* scratch, uint32_t code, int32_t peer,
                                       uint64_t tag) {
  if (atomicCAS(&scratch->code, 0u, code) == 0u) {
    scratch->peer = peer;
    scratch->tag = tag;
  }
}

// The generation (or epoch) a kernel acts on: the host's, or the device counter `*counter`
// (+1 for a writer, which advances the counter when it is done).
// NOTE: a volatile read, so the value cannot be re-read after the counter was advanced.
__device__ __forceinline__ uint64_t resolve_generation(uint64_t requested, const uint64_t* counter,
                                                       bool next) {
  if (requested != kDeviceGeneration) return requested;
  return *reinterpret_cast<const volatile uint64_t*>(counter) + (next ? 1 : 0);
}

}  // namespace iser::cuda
