// Links the installed CUDA part (iser::cuda, iser::runtime, iser::moe) from plain C++; runs host
// code only, so it needs no GPU.
#include <cstdio>

#include "iser/gpu_planner.h"
#include "iser/moe_ep_layer.h"
#include "iser/runtime.h"

int main() {
  const auto layout = iser::GpuPlanLayout::make(iser::Topology::make(8, 64, 2));
  std::printf("consumer_gpu: GPU plan buffer of %d words\n", layout.total_words());
  return layout.total_words() > 0 ? 0 : 1;
}
