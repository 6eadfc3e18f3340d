// iser: per-invocation replication of hot experts for EP MoE layers.
#include <cstdio>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.h"
#include "iser/error.h"

// NOLINTNEXTLINE(bugprone-exception-escape): only a failing stderr write can escape the handlers.
int main(int argc, char** argv) {
  CLI::App app{"iser: plan, measure and model per-invocation expert replication (ISER-MoE)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "iser 0.1.0");
  iser::cli::add_replay_command(app);
  iser::cli::add_convert_command(app);
  iser::cli::add_model_command(app);
  iser::cli::add_plan_command(app);
  iser::cli::add_eplb_command(app);
  iser::cli::add_counts_command(app);
  iser::cli::add_bound_command(app);
#if defined(ISER_WITH_CUDA)
  iser::cli::add_bench_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const iser::Error& e) {
    fmt::print(stderr, "iser: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "iser: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
