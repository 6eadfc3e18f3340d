// Pointer tables of the two grouped GEMMs of the gated MLP (one group per non-empty slot).
#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"

namespace iser::cuda {
namespace {

__global__ void __launch_bounds__(GroupPointersConfig::kThreads)
    group_pointers_kernel(const GroupPointersParams params) {
  constexpr int kMax = GroupPointersConfig::kMaxGroups;
  for (int g = threadIdx.x; g < params.num_groups; g += blockDim.x) {
    const int64_t row = params.row_begin[g];
    const int slot = params.slot[g];
    const int64_t he = params.hidden;
    const int64_t inter = params.intermediate;
    params.out[0 * kMax + g] = params.w13_table[slot];
    params.out[1 * kMax + g] = params.x + row * he;
    params.out[2 * kMax + g] = params.h13 + row * 2 * inter;
    params.out[3 * kMax + g] = params.w2_table[slot];
    params.out[4 * kMax + g] = params.act + row * inter;
    params.out[5 * kMax + g] = params.y + row * he;
  }
}

}  // namespace

void launch_group_pointers(const GroupPointersParams& params, cudaStream_t stream) {
  check_range(params.num_groups, 0, GroupPointersConfig::kMaxGroups, "group_pointers: num_groups");
  if (params.num_groups == 0) return;
  group_pointers_kernel<<<1, GroupPointersConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("group_pointers_kernel");
}

}  // namespace iser::cuda
