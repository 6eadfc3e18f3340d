// Human-facing replay output: terminal tables, the per-layer SVG, the Markdown report.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "iser/replay.h"

namespace iser::cli {

void print_replay_tables(const ReplayResult& result, std::FILE* out);

// Figure 7a: per-layer mean R before and after each policy at one EP degree, layers sorted by R
// before balancing.
std::string replay_layer_svg(const ReplayResult& result, int ep);

// Writes the per-layer SVG for every EP degree: `path` itself when there is one EP degree,
// else `<stem>-ep<P><ext>` beside it. Returns the files written.
std::vector<std::filesystem::path> write_layer_svgs(const ReplayResult& result,
                                                    const std::filesystem::path& path);

// The E1 comparison (the paper's experiment E1): report.md with Markdown tables plus SVG figures
// (Figure 7a per EP, 7b send-out/receive-in, 4c owner payloads, static vs per-invocation R).
void write_replay_report(const ReplayResult& result, const std::filesystem::path& dir);

}  // namespace iser::cli
