// The gap table of `iser replay --bound` (cmd_bound.cpp).
#pragma once

#include <cstdio>

#include "iser/replay.h"
#include "iser/trace.h"

namespace iser::cli {

// Per EP degree of `result`: the mean over its invocations of the bound's R (plan_bound on the
// same count matrices) and each policy's mean R minus it.
void print_bound_gaps(const RoutingSource& source, const ReplayResult& result, double time_limit_s,
                      std::FILE* out);

}  // namespace iser::cli
