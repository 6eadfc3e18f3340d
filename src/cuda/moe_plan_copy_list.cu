// GPU plan -> replication copy list (src/cuda/moe_kernels.h), the step between the GPU planner
// and the replicate kernel on the EP layer's COPY stream (src/moe/ep_layer.cpp): no host round
// trip between the count exchange and the replication.
// NOTE: the range checks are what the replicate kernel needs to stay inside the symmetric
// memory (peer_bases[owner], home slot expert % H, members [group_begin, group_begin + size),
// helper slot h). The host still validates the plan and compares this list with
// make_copy_list(plan) before it routes a single token to a helper slot.
#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"
#include "iser/gpu_planner.h"
#include "iser/replication.h"

namespace iser::cuda {
namespace {

__device__ bool op_in_range(const CopyOp& op, const PlanCopyListParams& p) {
  return op.owner >= 0 && op.owner < p.num_ranks && op.expert >= 0 &&
         op.expert / p.experts_per_rank == op.owner && op.group_begin >= 0 && op.group_size >= 1 &&
         op.group_size <= p.num_ranks - op.group_begin && op.helper >= 0 && op.helper < p.num_slots;
}

__global__ void __launch_bounds__(PlanCopyListConfig::kThreads)
    plan_copy_list_kernel(const PlanCopyListParams p) {
  __shared__ int rejected;
  const int32_t status = p.plan[GpuPlanLayout::kStatus];
  const int32_t num_broadcasts = status == 0 ? p.plan[GpuPlanLayout::kNumBroadcasts] : 0;
  if (threadIdx.x == 0) rejected = num_broadcasts < 0 || num_broadcasts > p.max_ops;
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < num_broadcasts && i < p.max_ops;
       i += blockDim.x) {
    const int32_t* rec = p.plan + p.broadcasts_offset + i * GpuPlanLayout::kBroadcastWords;
    CopyOp op;
    op.expert = rec[GpuPlanLayout::kExpert];
    op.owner = rec[GpuPlanLayout::kOwner];
    op.group_begin = rec[GpuPlanLayout::kGroupBegin];
    op.group_size = rec[GpuPlanLayout::kGroupSize];
    op.helper = rec[GpuPlanLayout::kHelper];
    // As make_copy_list: SAMI stays SAMI, every other mode is owner-direct.
    op.mode = rec[GpuPlanLayout::kMode] == static_cast<int32_t>(TransportMode::kSami)
                  ? TransportMode::kSami
                  : TransportMode::kOwnerDirect;
    if (!op_in_range(op, p)) atomicExch(&rejected, 1);
    p.ops[i] = op;
  }
  __syncthreads();
  const int32_t kept = rejected ? 0 : num_broadcasts;
  CopyOp null_op;
  null_op.expert = -1;
  null_op.owner = -1;
  null_op.group_begin = 0;
  null_op.group_size = 0;
  null_op.helper = 0;
  null_op.mode = TransportMode::kOwnerDirect;
  for (int i = kept + static_cast<int>(threadIdx.x); i < p.max_ops; i += blockDim.x) {
    p.ops[i] = null_op;
  }
  if (threadIdx.x == 0) *p.num_ops = rejected ? -1 : kept;
}

}  // namespace

void launch_plan_copy_list(const PlanCopyListParams& params, cudaStream_t stream) {
  // Callers build the params from a GpuPlanLayout; a bad one is an internal error.
  check_range(params.max_ops, 1, kMaxLocalCopyOps, "plan_copy_list: max_ops");
  check_range(params.num_ranks, 1, 1 << 20, "plan_copy_list: num_ranks");
  check_range(params.experts_per_rank, 1, 1 << 20, "plan_copy_list: experts_per_rank");
  check_range(params.plan == nullptr || params.ops == nullptr || params.num_ops == nullptr, 0, 0,
              "plan_copy_list: null pointers");
  plan_copy_list_kernel<<<1, PlanCopyListConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("plan_copy_list_kernel");
}

}  // namespace iser::cuda
