// The runtime's symmetric region and host staging as its configuration sizes them: the layouts
// the runtime kernels address (cuda/region_layout.h, cuda/host_lane.h) computed from a
// RuntimeConfig. Header-only and CUDA-free so host code and CPU tests share it.
#pragma once

#include <cstdint>

#include "cuda/host_lane.h"
#include "cuda/region_layout.h"
#include "iser/runtime.h"

namespace iser::runtime {

inline RegionLayout make_region_layout(const RuntimeConfig& config) {
  RegionLayout layout;
  layout.num_ranks = config.num_ranks;
  layout.num_experts = config.num_experts;
  layout.experts_per_rank = config.experts_per_rank();
  layout.num_slots = config.num_slots;
  layout.num_layers = config.num_layers;
  layout.num_banks = config.num_banks;
  layout.slot_stride = config.bundle.slot_stride();
  layout.bundle_bytes = config.bundle.bytes();
  const int64_t p = config.num_ranks;
  int64_t offset = 0;
  layout.count_rows = offset;
  offset = align_up(offset + 2 * p * config.num_experts * 4, 128);
  layout.count_flags = offset;
  offset = align_up(offset + p * 8, 128);
  layout.count_stamps = offset;
  offset = align_up(offset + 2 * p * 8, 128);
  layout.ready_flags = offset;
  offset = align_up(offset + p * 8, 128);
  layout.consumed_flags = offset;
  offset = align_up(offset + p * 8, kSlotAlignment);
  layout.home = offset;
  offset += static_cast<int64_t>(config.num_layers) * layout.experts_per_rank * layout.slot_stride;
  layout.helper = offset;
  offset += static_cast<int64_t>(config.num_banks) * config.num_slots * layout.slot_stride;
  // Regions are placed back to back in logical mode; keep each one 2-MiB aligned.
  layout.total = align_up(offset, int64_t{2} << 20);
  return layout;
}

inline StagingLayout make_staging_layout(const RuntimeConfig& config) {
  StagingLayout s;
  s.num_ranks = config.num_ranks;
  s.num_slots = config.num_slots;
  s.num_banks = config.num_banks;
  s.capacity = host_lane_slices(config.bundle.num_slices(), config.host_share);
  return s;
}

}  // namespace iser::runtime
