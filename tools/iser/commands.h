// Subcommands of the `iser` CLI; each lives in its own cmd_<name>.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace iser::cli {

void add_replay_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_model_command(CLI::App& app);

}  // namespace iser::cli
