// Consumer-side kernels of the protocol stress harness (protocol_stress.h): compare every helper
// slot the READY gate validated with its owner's home bundle, then poison the slots of the
// generation so that the next use of the bank must rewrite every byte.
#include <cstdint>

#include <cuda_runtime.h>

#include "stress_kernels.h"

namespace iser::testing {
namespace {

struct StressCheckConfig {
  static constexpr int kThreads = 256;
};

// blockIdx.x = (view, rank d, helper h): the view's gate said slot (d, h) holds expert e (or -1).
__global__ void __launch_bounds__(StressCheckConfig::kThreads)
    check_replicas_kernel(const StressCheckParams p) {
  const int slots = p.num_ranks * p.num_slots;
  const int view = static_cast<int>(blockIdx.x) / slots;
  const int d = static_cast<int>(blockIdx.x) % slots / p.num_slots;
  const int h = static_cast<int>(blockIdx.x) % p.num_slots;
  const int32_t expert = p.slot_expert[static_cast<int64_t>(view) * slots + d * p.num_slots + h];
  if (expert < 0) return;
  const int owner = expert / p.experts_per_rank;
  const auto* slot = reinterpret_cast<const int4*>(p.base + d * p.region_bytes + p.helper_offset +
                                                   h * p.slot_stride);
  const auto* home = reinterpret_cast<const int4*>(p.base + owner * p.region_bytes + p.home_offset +
                                                   (expert % p.experts_per_rank) * p.slot_stride);
  unsigned long long bad = 0;
  // NOTE: volatile loads: a slot's bytes change between generations (poison, then the next
  // replica), so nothing may be served from a cache line of an older launch.
  for (int64_t i = threadIdx.x; i < p.bundle_bytes / 16; i += blockDim.x) {
    int4 a;
    asm volatile("ld.volatile.global.v4.s32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w)
                 : "l"(slot + i));
    const int4 b = home[i];
    bad += (a.x != b.x || a.y != b.y || a.z != b.z || a.w != b.w) ? 1 : 0;
  }
  bad = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(bad));
  if ((threadIdx.x & 31) == 0 && bad > 0) atomicAdd(p.mismatches, bad);
  if (threadIdx.x == 0) atomicAdd(p.validated, 1ull);
}

// blockIdx.x = (rank d, helper h): poisons the slot of this generation's bank.
__global__ void __launch_bounds__(StressCheckConfig::kThreads)
    poison_slots_kernel(const StressCheckParams p) {
  const int d = static_cast<int>(blockIdx.x) / p.num_slots;
  const int h = static_cast<int>(blockIdx.x) % p.num_slots;
  auto* slot =
      reinterpret_cast<int4*>(p.base + d * p.region_bytes + p.helper_offset + h * p.slot_stride);
  const int poison = static_cast<int>(0x01010101u * p.poison);
  for (int64_t i = threadIdx.x; i < p.bundle_bytes / 16; i += blockDim.x) {
    slot[i] = make_int4(poison, poison, poison, poison);
  }
}

}  // namespace

cudaError_t preload_stress_kernels() {
  cudaFuncAttributes attributes{};
  for (const void* kernel : {reinterpret_cast<const void*>(&check_replicas_kernel),
                             reinterpret_cast<const void*>(&poison_slots_kernel)}) {
    const cudaError_t error = cudaFuncGetAttributes(&attributes, kernel);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

cudaError_t launch_check_replicas(const StressCheckParams& params, cudaStream_t stream) {
  const int blocks = params.num_views * params.num_ranks * params.num_slots;
  if (blocks > 0) {
    check_replicas_kernel<<<blocks, StressCheckConfig::kThreads, 0, stream>>>(params);
  }
  return cudaGetLastError();
}

cudaError_t launch_poison_slots(const StressCheckParams& params, cudaStream_t stream) {
  const int blocks = params.num_ranks * params.num_slots;
  if (blocks > 0) poison_slots_kernel<<<blocks, StressCheckConfig::kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace iser::testing
