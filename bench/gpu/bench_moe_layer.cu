// The reference EP MoE layer end to end on P GPUs (one process each): OFF vs ON with overlap.
// Same flags as `iser bench moe layer`; see bench/moe/moe_bench.h.
#include <string>
#include <vector>

#include "bench/moe/moe_bench.h"

int main(int argc, char** argv) {
  return iser::moe::layer_main(std::vector<std::string>(argv + 1, argv + argc));
}
