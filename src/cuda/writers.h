// Who moves which 8-KiB slices of a CopyOp (docs/design.md §9). Header-only and CUDA-free: the
// replicate kernel, the READY gate, the runtime and the CPU tests share it.
//
// The writers of an op under a copy mode (CopyOp::mode, or the transport's override):
//  - owner-direct: the owner alone (writer 0 of 1), inside or outside the group;
//  - SAMI: the g members, member i = writer i of g;
//  - owner-assisted SAMI: SAMI, plus the owner as writer g of g + 1 when it is outside the group
//    (inside, it already is a member: plain SAMI).
// Writer k of n moves slices j = k (mod n) and stores each to every member of the group, so every
// member's helper slot receives each slice exactly once.
// Namespace runtime: part of the runtime's device protocol, kept in the cuda layer because the
// kernels address it and a layer includes only the layers below it.
#pragma once

#include <cstdint>

#include "iser/copy_list.h"

namespace iser::runtime {

struct OpWriter {
  int32_t idx = -1;  // -1: the rank does not write the op
  int32_t count = 0;
};

constexpr bool owner_in_group(const CopyOp& op) {
  return op.owner >= op.group_begin && op.owner < op.group_begin + op.group_size;
}

// A transport's override of every op's mode, as the kernels' params carry it: a TransportMode
// value, or kNoModeOverride (each op's own mode).
inline constexpr int32_t kNoModeOverride = -1;
constexpr int32_t mode_override_of(TransportMode mode) {
  return static_cast<int32_t>(mode);
}

// The mode an op is copied under: its own, or the transport's override.
constexpr TransportMode effective_mode(const CopyOp& op, int32_t mode_override) {
  return mode_override != kNoModeOverride ? static_cast<TransportMode>(mode_override) : op.mode;
}

constexpr OpWriter op_writer(const CopyOp& op, TransportMode mode, int rank) {
  if (mode == TransportMode::kOwnerDirect) {
    return rank == op.owner ? OpWriter{0, 1} : OpWriter{-1, 1};
  }
  const bool assisted = mode == TransportMode::kSamiOwner && !owner_in_group(op);
  const int32_t count = op.group_size + (assisted ? 1 : 0);
  if (rank >= op.group_begin && rank < op.group_begin + op.group_size) {
    return {rank - op.group_begin, count};
  }
  return {assisted && rank == op.owner ? op.group_size : -1, count};
}

// Slices writer `w` moves out of `num_slices`, and the slice of its task `task_idx` (tasks are
// the writer's slices in increasing order).
constexpr int64_t writer_slice_count(const OpWriter& w, int64_t num_slices) {
  if (w.idx < 0 || w.idx >= num_slices) return 0;
  return (num_slices - w.idx + w.count - 1) / w.count;
}

constexpr int64_t writer_slice_index(const OpWriter& w, int64_t task_idx) {
  return w.idx + task_idx * w.count;
}

}  // namespace iser::runtime
