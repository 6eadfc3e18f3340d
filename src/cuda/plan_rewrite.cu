// Launch unit of the fused planner + rewrite kernel.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/launch_check.h"
#include "cuda/plan_rewrite.cuh"

namespace iser::cuda {

int plan_rewrite_smem_bytes(const PlanRewriteParams& params) {
  const PlanParams& plan = params.plan;
  const int words = std::max(
      PlanSmem::for_params(plan).total,
      plan_rewrite_detail::tile_smem_words(plan.num_experts, plan.max_broadcasts, plan.num_ranks));
  return static_cast<int>(sizeof(int32_t)) * words;
}

int prepare_plan_rewrite_kernel(int smem_bytes, bool iser) {
  const auto kernel = iser ? plan_rewrite_kernel<true> : plan_rewrite_kernel<false>;
  check_cuda(raise_dynamic_smem_limit(reinterpret_cast<const void*>(kernel), smem_bytes),
             "the fused plan + rewrite kernel's shared memory");
  int device = 0;
  int sms = 0;
  int per_sm = 0;
  int cooperative = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "the device's SM count");
  check_cuda(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device),
             "the device's cooperative-launch support");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel,
                                                           PlanRewriteConfig::kThreads, smem_bytes),
             "the fused plan + rewrite kernel's occupancy");
  return cooperative != 0 ? per_sm * sms : 0;
}

void launch_plan_rewrite(const PlanRewriteParams& params, int max_ctas, CUstream_st* stream) {
  // The layout travels as a kernel argument, as for the plan kernel (plan.cu).
  const PlanSmem lay = PlanSmem::for_params(params.plan);
  const long long tiles = static_cast<long long>(params.num_rows) * params.num_tiles;
  // Split the tiles' slot passes over the CTAs the plans leave free, at most one route per lane.
  PlanRewriteParams split = params;
  split.num_parts =
      tile_parts(tiles, max_ctas - params.plan.num_plans, PlanRewriteConfig::kRoutesPerLane);
  const long long works = tiles * split.num_parts;
  const long long ctas = std::min<long long>(params.plan.num_plans + works, max_ctas);
  // One CTA per plan, and at least one more for the tiles (plan_rewrite_kernel).
  check_range(params.plan.num_plans, 1, max_ctas - (works > 0 ? 1 : 0),
              "fused plan + rewrite: plans in one launch");
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(PlanRewriteConfig::kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(plan_rewrite_smem_bytes(params));
  config.stream = stream;
  // NOTE: cooperative: every CTA is resident at once, which the plan waits rely on
  // (plan_rewrite.cuh). Captured into a CUDA graph as a cooperative kernel node.
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const auto kernel = params.plan.iser ? plan_rewrite_kernel<true> : plan_rewrite_kernel<false>;
  check_cuda(cudaLaunchKernelEx(&config, kernel, split, lay), "launch of plan_rewrite_kernel");
}

}  // namespace iser::cuda
