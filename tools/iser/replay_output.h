// Human-facing replay output: terminal tables, the summary line, SVG figures, the Markdown
// report.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "iser/replay.h"

namespace iser::cli {

// Which policies the charts draw: few series, so each keeps its own colour, marker and dash.
struct ChartOptions {
  std::vector<std::string> policies;  // empty: default_chart_policies()
};
// none, eplb, eplb-window, iser (or halo-q without iser), oracle: those of `result` only.
std::vector<std::string> chart_policies(const ReplayResult& result, const ChartOptions& options);

const PolicySummary* find_summary(const ReplayResult& result, int ep, std::string_view policy);
// The EP degree the summary line and the headline chart use: 8 where replayed, else the largest.
int headline_ep(const ReplayResult& result);
// What eplb / eplb-equal-mem planned from, for captions ("the 8 warm-up iterations").
std::string static_plan_source(const ReplayResult& result);

void print_replay_tables(const ReplayResult& result, std::FILE* out);

// One line a reader can quote: per-invocation replication against static EPLB planned from
// the past at one EP degree (EP8 where replayed, else the largest), with memory and traffic.
// Empty when the result lacks either side.
std::string replay_summary_line(const ReplayResult& result);

// Figure 7a: per-layer mean R before and after each charted policy at one EP degree, layers
// sorted by R before balancing.
std::string replay_layer_svg(const ReplayResult& result, int ep, const ChartOptions& options = {});

// Writes the per-layer SVG for every EP degree: `path` itself when there is one EP degree,
// else `<stem>-ep<P><ext>` beside it. Returns the files written.
std::vector<std::filesystem::path> write_layer_svgs(const ReplayResult& result,
                                                    const std::filesystem::path& path,
                                                    const ChartOptions& options = {});

// report.md: the headline chart (mean R per iteration at the summary's EP degree) and the
// summary line first, then Markdown tables and the other figures (Figure 7a per EP, static vs
// per-invocation R, memory, 7b send-out/receive-in, 4c owner payloads).
void write_replay_report(const ReplayResult& result, const std::filesystem::path& dir,
                         const ChartOptions& options = {});

}  // namespace iser::cli
