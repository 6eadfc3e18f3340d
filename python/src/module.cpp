// iser._core: the C++ core behind the Python package `iser` (python/iser/). Errors surface as
// iser.Error (a ValueError) carrying the message the CLI prints.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "iser/error.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "iser's C++ core (use the package `iser`, not this module)";
  m.attr("__version__") = ISER_VERSION;
  nb::exception<iser::Error>(m, "Error", PyExc_ValueError);
  iser::python::bind_plan(m);
  iser::python::bind_traces(m);
  iser::python::bind_eplb(m);
}
