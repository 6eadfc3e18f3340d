// Subcommands of the `iser` CLI; each lives in its own cmd_<name>.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace iser::cli {

// (subcommands are added here as they land)
void add_plan_command(CLI::App& app);  // cmd_plan.cpp

}  // namespace iser::cli
