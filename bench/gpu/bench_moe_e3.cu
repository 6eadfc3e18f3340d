// E3 analogue on one GPU: slowest-rank expert time OFF / ON / balanced (docs/design.md §11).
// Same flags as `iser bench moe e3`; see bench/moe/moe_bench.h.
#include <string>
#include <vector>

#include "bench/moe/moe_bench.h"

int main(int argc, char** argv) {
  return iser::moe::e3_main(std::vector<std::string>(argv + 1, argv + argc));
}
