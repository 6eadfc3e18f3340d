// Host lane of the p2p-sami-host transport (Transport::kP2PSamiHost). Header-only and CUDA-free:
// the replicate kernel, the runtime's staging allocation and the CPU tests share it.
//
// Every op's slices split in two:
//  - the head [0, nvlink_slices) moves over NVLink exactly as p2p-sami-owner moves a whole bundle
//    (cuda/writers.h: writer k of n moves j = k (mod n), j < nvlink_slices);
//  - the tail [nvlink_slices, num_slices) takes the host lane: the owner stores it once into
//    pinned host memory (posted writes over its own PCIe link) and publishes one flag per chunk;
//    every other member polls the flags and reads the chunks over its own PCIe link into its own
//    helper slot. An owner inside its group copies the tail into its own slot from its home.
// PCIe runs beside NVLink, so the tail adds bandwidth instead of sharing the NVLink ports; host
// memory is also a one-write, many-reads broadcast for groups of g > 1.
// Namespace runtime: part of the runtime's device protocol, kept in the cuda layer because the
// kernels address it and a layer includes only the layers below it.
#pragma once

#include <cstdint>

#include "cuda/region_layout.h"
#include "cuda/writers.h"
#include "iser/replication.h"

namespace iser::runtime {

inline constexpr int64_t kHostChunkSlices = 4;  // slices per flag (32 KiB)

// Slices of a bundle of `num_slices` that take the host lane under `share` (nearest integer,
// clamped to [0, num_slices]).
constexpr int64_t host_lane_slices(int64_t num_slices, double share) {
  if (!(share > 0.0)) return 0;
  if (share >= 1.0) return num_slices;
  const int64_t n = static_cast<int64_t>(share * static_cast<double>(num_slices) + 0.5);
  return n < num_slices ? n : num_slices;
}

constexpr int64_t nvlink_slices(int64_t num_slices, int64_t host_slices) {
  return num_slices - host_slices;
}

constexpr int64_t host_lane_chunks(int64_t host_slices) {
  return (host_slices + kHostChunkSlices - 1) / kHostChunkSlices;
}

// What rank `rank` does in the host lane of `op`: the owner stages the tail (and, inside its
// group, copies it into its own slot), every other member fetches it. Null ops (group_size 0)
// have no host lane.
enum class HostRole : int32_t { kNone = 0, kStage = 1, kFetch = 2 };

constexpr HostRole host_role(const CopyOp& op, int rank, int64_t host_slices) {
  if (host_slices <= 0 || op.group_size <= 0) return HostRole::kNone;
  if (rank == op.owner) return HostRole::kStage;
  if (rank >= op.group_begin && rank < op.group_begin + op.group_size) return HostRole::kFetch;
  return HostRole::kNone;
}

// Slices of `op` that rank `rank` moves over NVLink under the transport's mode (p2p-sami-owner
// for p2p-sami-host), out of the head only.
constexpr int64_t nvlink_slice_count(const CopyOp& op, TransportMode mode, int rank,
                                     int64_t num_slices, int64_t host_slices) {
  return writer_slice_count(op_writer(op, mode, rank), nvlink_slices(num_slices, host_slices));
}

// Pinned host staging shared by every rank: one area per (bank, helper, group_begin): a valid
// copy list gives each (member, helper) one op per generation, so no two ops of a generation share
// an area, and the reuse fence of generation g (every writer of g - num_banks finished, which
// includes every member that read the area) also frees the area. Each area holds `capacity`
// slices of data and one 8-byte flag per chunk (flags after all data). Strides use the capacity
// (RuntimeConfig::host_share), not the current share, so every share fits the same allocation.
// A flag holds 2g + 1 once the owner staged the chunk for generation g, 2g when it skipped it
// (reuse fence timeout); flags only grow (generations are monotone, the memory starts zeroed).
struct StagingLayout {
  int32_t num_ranks = 0;
  int32_t num_slots = 0;
  int32_t num_banks = 0;
  int64_t capacity = 0;  // slices per area

  constexpr int64_t num_areas() const {
    return static_cast<int64_t>(num_banks) * num_slots * num_ranks;
  }
  constexpr int64_t chunks_per_area() const { return host_lane_chunks(capacity); }
  constexpr int64_t area(int bank, int helper, int group_begin) const {
    return (static_cast<int64_t>(bank) * num_slots + helper) * num_ranks + group_begin;
  }
  // Byte offset of host-lane slice `lane_slice` (0 = the op's slice nvlink_slices) of an area.
  constexpr int64_t data(int64_t area_idx, int64_t lane_slice) const {
    return (area_idx * capacity + lane_slice) * kSliceBytes;
  }
  constexpr int64_t flag(int64_t area_idx, int64_t chunk) const {
    return num_areas() * capacity * kSliceBytes + (area_idx * chunks_per_area() + chunk) * 8;
  }
  constexpr int64_t total() const {
    return align_up(num_areas() * capacity * kSliceBytes + num_areas() * chunks_per_area() * 8,
                    int64_t{4096});
  }
};

}  // namespace iser::runtime
