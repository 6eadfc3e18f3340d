// Plan -> copy list (include/iser/copy_list.h).
#include "iser/copy_list.h"

namespace iser {

std::vector<CopyOp> make_copy_list(const Plan& plan) {
  std::vector<CopyOp> ops;
  ops.reserve(plan.broadcasts.size());
  for (const Broadcast& b : plan.broadcasts) {
    CopyOp op;
    op.expert = b.expert;
    op.owner = b.owner;
    op.group_begin = b.group_begin;
    op.group_size = b.group_size;
    op.helper = b.helper;
    op.mode = b.mode == TransportMode::kSami ? TransportMode::kSami : TransportMode::kOwnerDirect;
    ops.push_back(op);
  }
  return ops;
}

}  // namespace iser
