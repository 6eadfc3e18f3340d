// Human-facing replay output: terminal tables, the per-layer SVG, the Markdown report.
#pragma once

#include <cstdio>
#include <string>

#include "iser/replay.h"

namespace iser::cli {

void print_replay_tables(const ReplayResult& result, std::FILE* out);

}  // namespace iser::cli
