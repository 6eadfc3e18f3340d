// The pieces of the iser._core module, one function per source file.
#pragma once

#include <nanobind/nanobind.h>

namespace iser::python {

void bind_plan(nanobind::module_& m);    // plan.cpp: Plan, plan, rewrite, counts_from_topk
void bind_traces(nanobind::module_& m);  // traces.cpp: read_trace, write_trace, convert
void bind_eplb(nanobind::module_& m);    // eplb.cpp: eplb, policies, bundled_trace

}  // namespace iser::python
