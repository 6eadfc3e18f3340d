// Routing helpers shared by the MoE benchmarks (bench_e3.cpp, bench_layer.cpp): the --layers
// list and the routing trace (default: the bundled one), checked against the benchmark's E and
// top-k.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "iser/trace.h"

namespace iser::moe {

// "first:last:step" or a comma list; every layer in [0, num_layers). Throws iser::Error naming
// the flag and the value.
std::vector<int> parse_layers(const std::string& spec, int num_layers);

// Opens `path` (empty: bundled_default_trace()) and checks that it routes `num_experts` experts
// with top-`top_k`.
std::unique_ptr<RoutingSource> open_bench_trace(const std::string& path, int num_experts,
                                                int top_k);

}  // namespace iser::moe
