// Byte layout of one rank's symmetric region (identical on every rank; docs/runtime.md draws it),
// as the runtime kernels address it; the runtime computes it from its configuration
// (runtime/layout.h). Header-only and CUDA-free so host code, kernels and CPU tests share it.
// Namespace runtime: part of the runtime's device protocol, kept in the cuda layer because the
// kernels address it and a layer includes only the layers below it.
#pragma once

#include <cstdint>

namespace iser::runtime {

constexpr int64_t align_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

struct RegionLayout {
  int32_t num_ranks = 0;
  int32_t num_experts = 0;
  int32_t experts_per_rank = 0;  // H
  int32_t num_slots = 0;         // S
  int32_t num_layers = 0;
  int32_t num_banks = 0;
  int64_t slot_stride = 0;
  int64_t bundle_bytes = 0;
  // Control block: written by peers (remote stores), read locally.
  int64_t count_rows = 0;      // int32 [2 parities][P][E]: row s written by source rank s
  int64_t count_flags = 0;     // uint64 [P]: last epoch source s started (its progress)
  int64_t count_stamps = 0;    // uint64 [2 parities][P]: epoch of the row s delivered there
  int64_t ready_flags = 0;     // uint64 [P]: 2*generation + ok, published by writer w
  int64_t consumed_flags = 0;  // uint64 [P]: last generation member d released
  int64_t home = 0;            // [num_layers][H] slots
  int64_t helper = 0;          // [num_banks][S] slots
  int64_t total = 0;

  constexpr int64_t count_row(int parity, int src_rank) const {
    return count_rows + (static_cast<int64_t>(parity) * num_ranks + src_rank) * num_experts * 4;
  }
  constexpr int64_t home_slot(int layer, int home_idx) const {
    return home + (static_cast<int64_t>(layer) * experts_per_rank + home_idx) * slot_stride;
  }
  constexpr int64_t helper_slot(int bank, int helper_idx) const {
    return helper + (static_cast<int64_t>(bank) * num_slots + helper_idx) * slot_stride;
  }
};

}  // namespace iser::runtime
