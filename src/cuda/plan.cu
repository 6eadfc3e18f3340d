// Launch unit of the HALO-Q planner kernel.
#include <cuda_runtime.h>

#include "cuda/launch_check.h"
#include "cuda/plan.cuh"

namespace iser::cuda {

int plan_smem_bytes(const PlanParams& params) {
  return static_cast<int>(sizeof(int32_t)) * PlanSmem::for_params(params).total;
}

bool plan_finish_scratch_fits(const PlanParams& params) {
  // The sequential iser form finishes a challenger with the stage-4 pair lists as scratch
  // (plan_iser_finish.cuh): level_chains takes 6 max_broadcasts + 5 P words, top-up P.
  return PlanSmem::for_params(params).finish_scratch_words >=
         6 * params.max_broadcasts + 5 * params.num_ranks;
}

void prepare_plan_kernel(int smem_bytes) {
  for (const void* kernel : {reinterpret_cast<const void*>(plan_kernel<false>),
                             reinterpret_cast<const void*>(plan_kernel<true>)}) {
    check_cuda(raise_dynamic_smem_limit(kernel, smem_bytes), "the plan kernel's shared memory");
  }
}

void launch_plan(const PlanParams& params, CUstream_st* stream) {
  // The layout travels as a kernel argument: computed on the device it would be the first
  // few hundred instructions every thread fetches cold.
  const PlanSmem lay = PlanSmem::for_params(params);
  const size_t smem = sizeof(int32_t) * lay.total;
  if (params.iser) {
    plan_kernel<true><<<params.num_plans, PlanConfig::kThreads, smem, stream>>>(params, lay);
  } else {
    plan_kernel<false><<<params.num_plans, PlanConfig::kThreads, smem, stream>>>(params, lay);
  }
  ISER_CHECK_LAUNCH("plan_kernel");
}

}  // namespace iser::cuda
