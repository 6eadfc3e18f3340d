// Launch unit of the replication kernel and the copy-engine transport's fence/publish kernels.
#include "cuda/replicate.cuh"

namespace iser::cuda {
namespace {

struct FenceParams {
  RankSpace space;
  const CopyOp* ops;
  int32_t num_ops;
  int32_t num_banks;
  uint64_t generation;
};

struct FenceConfig {
  static constexpr int kThreads = 256;
};

// Copy-engine transport, before the copies: the reuse fence. A blocked member cannot stop a
// copy already enqueued, so the generation is marked failed (readers fall back to home slots).
__global__ void __launch_bounds__(FenceConfig::kThreads)
    copy_engine_fence_kernel(const FenceParams p) {
  __shared__ uint32_t targets[ReplicateConfig::kRankWords];
  __shared__ uint32_t blocked[ReplicateConfig::kRankWords];
  const int local_idx = static_cast<int>(blockIdx.x);
  const int w = p.space.first_rank + local_idx;
  Scratch* scratch = p.space.scratch + local_idx;
  const bool failed = fence_targets(p.space, p.ops, p.num_ops,
                                    runtime::mode_override_of(TransportMode::kOwnerDirect), w,
                                    p.generation, p.num_banks, 0, targets, blocked, scratch);
  if (threadIdx.x == 0 && failed) atomicOr(&scratch->replicate_failed, 1u);
}

struct PublishParams {
  RankSpace space;
  uint64_t generation;
};

// Copy-engine transport, after the copies (stream order: they have completed).
__global__ void __launch_bounds__(FenceConfig::kThreads)
    publish_ready_kernel(const PublishParams p) {
  const int local_idx = static_cast<int>(blockIdx.x);
  publish_ready(p.space, p.space.first_rank + local_idx, p.generation, false, 1u,
                p.space.scratch + local_idx);
}

template <StoreKind kStore, CopyPath kPath>
void launch_replicate_kernel(const ReplicateParams& params, dim3 grid, const CopyShape& shape,
                             cudaStream_t stream) {
  const size_t smem =
      kPath == CopyPath::kBulk ? static_cast<size_t>(shape.warps) * shape.stages * kSliceBytes : 0;
  replicate_kernel<kStore, kPath><<<grid, shape.warps * 32, smem, stream>>>(params);
}

constexpr size_t kMaxStageBytes = static_cast<size_t>(ReplicateConfig::kMaxStages) * kSliceBytes;

}  // namespace

CopyShape resolve_copy_shape(CopyPath path, int warps, int stages) {
  CopyShape shape;
  shape.path = path;
  if (path == CopyPath::kBulk) {
    shape.warps = warps > 0 ? warps : ReplicateConfig::kDefaultBulkWarps;
    shape.stages = stages > 0 ? stages : ReplicateConfig::kDefaultBulkStages;
    // An explicit warp count with default stages: as many stages as fit.
    if (stages <= 0 && shape.warps * shape.stages > ReplicateConfig::kMaxStages) {
      shape.stages = ReplicateConfig::kMaxStages / shape.warps;
    }
  } else {
    shape.warps = warps > 0 ? warps : ReplicateConfig::kDefaultRegisterWarps;
    shape.stages = 0;
  }
  return shape;
}

void launch_replicate(const RankSpace& space, const ReplicateArgs& args, int local_begin,
                      int local_end, int num_sms, const CopyShape& shape, cudaStream_t stream) {
  ReplicateParams params;
  params.space = space;
  params.args = args;
  params.local_begin = local_begin;
  params.stages = shape.stages;
  const int host_ctas = args.host_slices > 0 ? args.host_ctas : 0;
  const dim3 grid(static_cast<unsigned>(num_sms + host_ctas),
                  static_cast<unsigned>(local_end - local_begin));
  const bool multicast = args.store == StoreKind::kMulticast;
  if (shape.path == CopyPath::kBulk) {
    if (multicast) {
      launch_replicate_kernel<StoreKind::kMulticast, CopyPath::kBulk>(params, grid, shape, stream);
    } else {
      launch_replicate_kernel<StoreKind::kPeer, CopyPath::kBulk>(params, grid, shape, stream);
    }
  } else {
    if (multicast) {
      launch_replicate_kernel<StoreKind::kMulticast, CopyPath::kRegisters>(params, grid, shape,
                                                                           stream);
    } else {
      launch_replicate_kernel<StoreKind::kPeer, CopyPath::kRegisters>(params, grid, shape, stream);
    }
  }
  ISER_CHECK_LAUNCH("replicate_kernel");
}

void launch_copy_engine_fence(const RankSpace& space, const CopyOp* ops, int num_ops,
                              uint64_t generation, int num_banks, int num_local,
                              cudaStream_t stream) {
  FenceParams params{space, ops, num_ops, num_banks, generation};
  copy_engine_fence_kernel<<<num_local, FenceConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("copy_engine_fence_kernel");
}

void launch_publish_ready(const RankSpace& space, uint64_t generation, int num_local,
                          cudaStream_t stream) {
  PublishParams params{space, generation};
  publish_ready_kernel<<<num_local, FenceConfig::kThreads, 0, stream>>>(params);
  ISER_CHECK_LAUNCH("publish_ready_kernel");
}

size_t scratch_bytes() {
  return sizeof(Scratch);
}

void preload_replicate_kernels() {
  const void* bulk[] = {
      reinterpret_cast<const void*>(&replicate_kernel<StoreKind::kPeer, CopyPath::kBulk>),
      reinterpret_cast<const void*>(&replicate_kernel<StoreKind::kMulticast, CopyPath::kBulk>)};
  for (const void* kernel : bulk) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kMaxStageBytes)),
               "the replicate kernel's shared-memory limit");
  }
  preload_functions(
      {bulk[0], bulk[1],
       reinterpret_cast<const void*>(&replicate_kernel<StoreKind::kPeer, CopyPath::kRegisters>),
       reinterpret_cast<const void*>(
           &replicate_kernel<StoreKind::kMulticast, CopyPath::kRegisters>),
       reinterpret_cast<const void*>(&copy_engine_fence_kernel),
       reinterpret_cast<const void*>(&publish_ready_kernel)});
}

}  // namespace iser::cuda
