// The copy list (docs/design.md §9): a plan's broadcasts as flat, device-friendly replication ops,
// the input of the replication kernels and the READY gate. Pure C++: the planners produce it
// (make_copy_list on the host, the GPU planner's plan_copy_list kernel on the device), the
// runtime validates and executes it.
#pragma once

#include <cstdint>
#include <vector>

#include "iser/plan.h"

namespace iser {

// One replication the kernel executes (a flat, device-friendly Broadcast).
struct CopyOp {
  int32_t expert = 0;
  int32_t owner = 0;
  int32_t group_begin = 0;
  int32_t group_size = 0;
  int32_t helper = 0;  // helper index h: local slot H + h on every member
  // Who writes (src/cuda/writers.h): kOwnerDirect (the owner writes every slice), kSami
  // (member i of g writes slices j = i (mod g)) or kSamiOwner (SAMI + an owner outside the group
  // as writer g of g + 1).
  TransportMode mode = TransportMode::kOwnerDirect;
};
static_assert(sizeof(CopyOp) == 6 * sizeof(int32_t), "CopyOp is read by kernels as six int32");
// Plan -> copy list (plan order). Point-to-point broadcasts become owner-direct ops; resident
// broadcasts are copied again (the runtime keeps no replica across generations yet).
std::vector<CopyOp> make_copy_list(const Plan& plan);

}  // namespace iser
