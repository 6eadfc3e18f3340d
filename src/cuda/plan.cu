// Launch unit of the HALO-Q planner kernel.
#include <cuda_runtime.h>

#include "cuda/plan.cuh"

namespace iser::cuda {

int plan_smem_bytes(const PlanParams& params) {
  const int C = params.num_slots < params.num_experts / params.num_ranks
                    ? params.num_slots
                    : params.num_experts / params.num_ranks;
  const PlanSmem lay = PlanSmem::make(params.num_ranks, params.num_experts, C,
                                      params.max_broadcasts, params.num_slots);
  return static_cast<int>(sizeof(int32_t)) * lay.total;
}

int prepare_plan_kernel(int smem_bytes) {
  return static_cast<int>(
      cudaFuncSetAttribute(plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
}

int launch_plan(const PlanParams& params, CUstream_st* stream) {
  plan_kernel<<<params.num_plans, PlanConfig::kThreads, plan_smem_bytes(params), stream>>>(params);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace iser::cuda
