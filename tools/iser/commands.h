// Subcommands of the `iser` CLI; each lives in its own cmd_<name>.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace iser::cli {

void add_replay_command(CLI::App& app);   // cmd_replay.cpp
void add_plan_command(CLI::App& app);     // cmd_plan.cpp
void add_eplb_command(CLI::App& app);     // cmd_eplb.cpp
void add_model_command(CLI::App& app);    // cmd_model.cpp
void add_convert_command(CLI::App& app);  // cmd_convert.cpp
void add_counts_command(CLI::App& app);   // cmd_bound.cpp
void add_bound_command(CLI::App& app);    // cmd_bound.cpp

#if defined(ISER_WITH_CUDA)
void add_bench_command(CLI::App& app);  // GPU benchmarks (cmd_bench.cpp)
#endif

}  // namespace iser::cli
