// act = bf16(silu(gate) * up) over the GEMM-1 output [rows, 2I] of the grouped gated MLP.
// NOTE: each element is computed by the same fp32 formula whatever its row's position, slot or
// launch shape, so a token's activation does not depend on where it runs (ON/OFF bitwise).
#include <cuda_bf16.h>

#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"

namespace iser::cuda {
namespace {

struct alignas(16) Bf16x8 {
  __nv_bfloat16 v[SiluMulConfig::kVec];
};

__global__ void __launch_bounds__(SiluMulConfig::kThreads)
    silu_mul_kernel(const SiluMulParams params) {
  constexpr int kVec = SiluMulConfig::kVec;
  const int vecs_per_row = params.intermediate / kVec;
  const int64_t num_vecs = params.num_rows * vecs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto* h13 = reinterpret_cast<const Bf16x8*>(params.h13);
  auto* act = reinterpret_cast<Bf16x8*>(params.act);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_vecs;
       i += stride) {
    const int64_t row = i / vecs_per_row;
    const int64_t col = i % vecs_per_row;
    const Bf16x8 gate = h13[row * 2 * vecs_per_row + col];
    const Bf16x8 up = h13[row * 2 * vecs_per_row + vecs_per_row + col];
    Bf16x8 out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float g = __bfloat162float(gate.v[j]);
      const float u = __bfloat162float(up.v[j]);
      // silu(g) = g / (1 + exp(-g)); expf (not __expf) keeps the host reference close.
      out.v[j] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
    }
    act[i] = out;
  }
}

}  // namespace

void launch_silu_mul(const SiluMulParams& params, cudaStream_t stream) {
  using Config = SiluMulConfig;
  // Callers validate the shape (ExpertShape::check); a bad one here is an internal error.
  check_range(params.intermediate % Config::kVec, 0, 0, "silu_mul: intermediate % 8");
  if (params.num_rows <= 0) return;
  const int64_t num_vecs = params.num_rows * (params.intermediate / Config::kVec);
  const int64_t blocks = (num_vecs + Config::kThreads - 1) / Config::kThreads;
  const int grid = static_cast<int>(blocks < Config::kMaxBlocks ? blocks : Config::kMaxBlocks);
  silu_mul_kernel<<<grid, Config::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("silu_mul_kernel");
}

}  // namespace iser::cuda
