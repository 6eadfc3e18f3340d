// Consumer-side kernels of the protocol stress harness (protocol_stress.h). No iser headers here:
// nvcc compiles stress_kernels.cu without the host-only parts of the tests.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace iser::testing {

// What the consumer kernels need (logical mode: regions back to back from `base`).
struct StressCheckParams {
  const int32_t* slot_expert = nullptr;  // [num_views][P*S]: the gate's output
  char* base = nullptr;                  // region of rank 0
  int64_t region_bytes = 0;
  int64_t helper_offset = 0;  // helper slot 0 of this generation's bank in a region
  int64_t home_offset = 0;    // home slot 0 of layer 0 in a region
  int64_t slot_stride = 0;
  int64_t bundle_bytes = 0;  // a multiple of 16
  int32_t num_views = 0;     // local ranks whose gate output is checked
  int32_t num_ranks = 0;
  int32_t num_slots = 0;
  int32_t experts_per_rank = 0;
  uint8_t poison = 0;                        // what launch_poison_slots writes
  unsigned long long* mismatches = nullptr;  // 16-byte words that differ from the owner's
  unsigned long long* validated = nullptr;   // (view, slot) pairs checked
};

// Compares every slot a view's gate validated with its owner's home bundle (counts mismatching
// 16-byte words and checked pairs).
cudaError_t launch_check_replicas(const StressCheckParams& params, cudaStream_t stream);
// Poisons every helper slot of the bank (helper_offset) on every rank.
cudaError_t launch_poison_slots(const StressCheckParams& params, cudaStream_t stream);
// Loads the consumer kernels now (cudaFuncGetAttributes). NOTE: with lazy
// module loading the first launch of a kernel loads its module, which waits for the kernels
// already running on the device; a first launch on one writer stream while another stream's
// count exchange spins for that writer's rank would stall both until the exchange times out.
// The harness therefore loads every kernel it launches before its first generation, as
// Runtime's constructor does for the library's kernels.
cudaError_t preload_stress_kernels();

}  // namespace iser::testing
