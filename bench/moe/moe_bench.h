// GPU benchmarks of the reference MoE layer (docs/design.md §11), shared by the stand-alone
// executables in bench/gpu/ and by `iser bench moe ...`. Each entry parses its own nccl-tests-style
// flags (args exclude the program / subcommand names), prints a table and returns an exit status;
// bad flags or inputs print one error line and return non-zero.
#pragma once

#include <string>
#include <vector>

namespace iser::moe {

// E3 analogue on one GPU (the paper's Figure 9): EP ranks simulated one at a time, each rank's
// grouped gated MLP timed for its per-slot loads OFF (no helper slots), ON (a plan's quotas) and
// with perfectly balanced routing; reports the slowest rank per layer and the means.
int e3_main(const std::vector<std::string>& args);

// The reference EP MoE layer end to end, one process per GPU (include/iser/moe_ep_layer.h): OFF
// and ON invocations interleaved; the slowest rank's layer time, shared-expert time, copy time,
// exposed copy (READY wait), planner time and count-exchange wait, medians; ON/OFF bitwise
// check. The calling process spawns -P copies of its own executable (/proc/self/exe) with
// `reexec_prefix` + args, one per GPU.
int layer_main(const std::vector<std::string>& args,
               const std::vector<std::string>& reexec_prefix = {});

}  // namespace iser::moe
