// Combine: each token's weighted sum of its top-k expert outputs, in a fixed order (j = 0..k-1).
#include <cuda_bf16.h>

#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"

namespace iser::cuda {
namespace {

struct alignas(16) Bf16x8 {
  __nv_bfloat16 v[CombineConfig::kVec];
};

__global__ void __launch_bounds__(CombineConfig::kThreads)
    combine_kernel(const CombineParams params) {
  constexpr int kVec = CombineConfig::kVec;
  const int vecs = params.hidden / kVec;
  const auto* y = reinterpret_cast<const Bf16x8*>(params.y);
  auto* out = reinterpret_cast<Bf16x8*>(params.out);
  for (int64_t token = blockIdx.x; token < params.num_tokens; token += gridDim.x) {
    const int32_t* rows = params.route_row + token * params.top_k;
    const float* weights = params.route_weight + token * params.top_k;
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      float acc[kVec] = {};
      if (params.shared != nullptr) {
        const Bf16x8 base = reinterpret_cast<const Bf16x8*>(params.shared)[token * vecs + v];
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[i] = __bfloat162float(base.v[i]);
      }
      for (int j = 0; j < params.top_k; ++j) {
        const int32_t row = rows[j];
        if (row < 0) continue;
        const float w = weights[j];
        const Bf16x8 part = y[static_cast<int64_t>(row) * vecs + v];
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[i] = fmaf(w, __bfloat162float(part.v[i]), acc[i]);
      }
      Bf16x8 result;
#pragma unroll
      for (int i = 0; i < kVec; ++i) result.v[i] = __float2bfloat16_rn(acc[i]);
      out[token * vecs + v] = result;
    }
  }
}

}  // namespace

void launch_combine(const CombineParams& params, cudaStream_t stream) {
  check_range(params.hidden % CombineConfig::kVec, 0, 0, "combine: hidden % 8");
  if (params.num_tokens <= 0) return;
  const int grid = static_cast<int>(params.num_tokens < 65535 ? params.num_tokens : 65535);
  combine_kernel<<<grid, CombineConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("combine_kernel");
}

}  // namespace iser::cuda
