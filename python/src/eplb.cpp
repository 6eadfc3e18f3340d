// iser.eplb / iser.policies: DeepSeek's EPLB with exactly the results `iser eplb` prints, and
// the policy names. (iser.replay runs the packaged CLI: python/iser/_replay.py.)
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "iser/eplb.h"
#include "iser/policy.h"
#include "iser/trace.h"

namespace iser::python {
namespace {

nb::tuple eplb(const AnyArray& weight_array, int num_replicas, int num_groups, int num_nodes,
               int num_gpus) {
  check_ndim(weight_array, 2, "weight", "[num_layers, num_experts]");
  const std::vector<double> weight = read_double(weight_array, "weight");
  const EplbConfig config{num_replicas, num_groups, num_nodes, num_gpus};
  EplbPlacement p;
  {
    nb::gil_scoped_release release;
    p = eplb_rebalance(weight, static_cast<int>(weight_array.shape(0)),
                       static_cast<int>(weight_array.shape(1)), config);
  }
  const auto widen = [](const std::vector<int32_t>& v) {
    return std::vector<int64_t>(v.begin(), v.end());
  };
  const auto L = static_cast<size_t>(p.num_layers);
  const auto E = static_cast<size_t>(p.num_experts);
  return nb::make_tuple(
      to_numpy(widen(p.phy2log), {L, static_cast<size_t>(p.num_replicas)}),
      to_numpy(widen(p.log2phy), {L, E, static_cast<size_t>(p.max_replica_count)}),
      to_numpy(widen(p.logcnt), {L, E}));
}

}  // namespace

void bind_eplb(nb::module_& m) {
  m.def(
      "eplb",
      [](nb::handle weight, int num_replicas, int num_groups, int num_nodes, int num_gpus) {
        return eplb(as_array(weight, "weight"), num_replicas, num_groups, num_nodes, num_gpus);
      },
      nb::arg("weight"), nb::arg("num_replicas"), nb::arg("num_groups"), nb::arg("num_nodes"),
      nb::arg("num_gpus"));
  m.def("policies", &available_policies);
  m.def("bundled_trace", [] { return bundled_default_trace().string(); });
}

}  // namespace iser::python
