// `iser bench moe <name> [flags]`: the GPU benchmarks of the reference MoE layer (built with
// CUDA only; see bench/moe/moe_bench.h). Flags after the benchmark name go to it unchanged.
#include "commands.h"

#if defined(ISER_WITH_CUDA)
#include <string>
#include <vector>

#include "bench/moe/moe_bench.h"
#include "iser/error.h"

namespace iser::cli {

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "GPU benchmarks (nccl-tests-style flags)");
  bench->require_subcommand(1);
  auto* moe = bench->add_subcommand("moe", "reference EP MoE layer benchmarks");
  moe->require_subcommand(1);
  auto* e3 = moe->add_subcommand(
      "e3", "slowest-rank expert time OFF / ON / balanced on one GPU (the paper's Figure 9)");
  e3->prefix_command();  // every later argument belongs to the benchmark
  e3->set_help_flag();   // so does --help
  e3->callback([e3] {
    const int status = iser::moe::e3_main(e3->remaining());
    ISER_CHECK(status == 0, "bench moe e3 failed (status {})", status);
  });
  auto* layer = moe->add_subcommand(
      "layer", "the EP MoE layer end to end, one process per GPU: OFF vs ON with overlap");
  layer->prefix_command();
  layer->set_help_flag();
  layer->callback([layer] {
    const int status = iser::moe::layer_main(layer->remaining(), {"bench", "moe", "layer"});
    ISER_CHECK(status == 0, "bench moe layer failed (status {})", status);
  });
}

}  // namespace iser::cli
#endif
