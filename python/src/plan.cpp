// iser.plan / iser.rewrite / iser.counts_from_topk: one invocation's plan from a count matrix,
// exactly like `iser plan` (same policies, same JSON).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "arrays.h"
#include "bindings.h"
#include "iser/counts.h"
#include "iser/plan_json.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/validator.h"

namespace iser::python {
namespace {

// A plan together with what it was planned for (so it can be validated and applied).
struct PyPlan {
  Topology topo;
  CountMatrix counts;
  Plan plan;
  std::string policy;
  ValidationOptions validation;
  bool validated = false;
  int lsa_size = 0;  // as given (0: one team, and no "lsa_size" in the JSON, like the CLI)
};

// The broadcasts table's columns, in order.
constexpr const char* kBroadcastFields[] = {"expert",     "owner",  "level", "group_begin",
                                            "group_size", "helper", "mode",  "resident"};
constexpr size_t kNumBroadcastFields = std::size(kBroadcastFields);

CountMatrix counts_from_array(const AnyArray& a) {
  check_ndim(a, 2, "counts", "[num_ranks, num_experts]");
  const size_t P = a.shape(0);
  const size_t E = a.shape(1);
  ISER_CHECK(P >= 1 && P <= kMaxRanks, "counts: num_ranks = {} out of range [1, {}]", P, kMaxRanks);
  ISER_CHECK(E >= 1 && E <= kMaxExperts, "counts: num_experts = {} out of range [1, {}]", E,
             kMaxExperts);
  CountMatrix counts(static_cast<int>(P), static_cast<int>(E));
  const auto values = counts.data();
  read_int32(a, "counts", values);
  // One vectorisable pass; the slow search for the offending entry only on failure.
  int32_t smallest = 0;
  for (const int32_t v : values) smallest = std::min(smallest, v);
  if (smallest < 0) {
    const size_t i = static_cast<size_t>(
        std::find_if(values.begin(), values.end(), [](int32_t v) { return v < 0; }) -
        values.begin());
    throw Error(fmt::format("counts[{}][{}] = {} is negative", i / E, i % E, values[i]));
  }
  return counts;
}

PyPlan make_plan(const AnyArray& counts_array, int slots, const std::string& policy_name, int g_min,
                 int min_move, bool validate, int lsa_size) {
  PyPlan out;
  out.counts = counts_from_array(counts_array);
  out.topo =
      Topology::make(out.counts.num_ranks(), out.counts.num_experts(), slots, g_min, lsa_size);
  PolicyOptions options;
  options.min_move = min_move;
  const auto policy = make_policy(policy_name, out.topo, options);
  out.plan = policy->plan(out.counts).plan;
  out.policy = policy_name;
  out.lsa_size = lsa_size;
  out.validation = policy->validation();
  if (validate) check_plan(out.topo, out.counts, out.plan, out.validation);
  out.validated = validate;
  return out;
}

nb::object broadcasts_table(const PyPlan& p) {
  std::vector<int32_t> table;
  table.reserve(p.plan.broadcasts.size() * kNumBroadcastFields);
  for (const Broadcast& b : p.plan.broadcasts) {
    table.insert(table.end(), {b.expert, b.owner, b.level, b.group_begin, b.group_size, b.helper,
                               static_cast<int32_t>(b.mode), static_cast<int32_t>(b.resident)});
  }
  return to_numpy(std::move(table), {p.plan.broadcasts.size(), kNumBroadcastFields});
}

nb::object quotas_table(const PyPlan& p) {
  const size_t P = static_cast<size_t>(p.plan.num_ranks);
  std::vector<int32_t> table;
  table.reserve(p.plan.broadcasts.size() * P);
  for (const Broadcast& b : p.plan.broadcasts)
    table.insert(table.end(), b.quota.begin(), b.quota.end());
  return to_numpy(std::move(table), {p.plan.broadcasts.size(), P});
}

std::string plan_json_text(const PyPlan& p) {
  auto j = plan_to_json(p.plan);
  j["policy"] = p.policy;
  if (p.lsa_size > 0) j["lsa_size"] = p.lsa_size;
  if (p.validated) j["valid"] = true;
  return j.dump();
}

nb::object rewrite(const PyPlan& p, int rank, const AnyArray& topk_array) {
  check_ndim(topk_array, 2, "topk_ids", "[num_tokens, top_k]");
  ISER_CHECK(rank >= 0 && rank < p.topo.num_ranks, "rank = {} out of range [0, {})", rank,
             p.topo.num_ranks);
  const size_t T = topk_array.shape(0);
  const size_t k = topk_array.shape(1);
  const std::vector<int32_t> ids = read_int32(topk_array, "topk_ids");
  std::vector<int32_t> slots(ids.size());
  {
    nb::gil_scoped_release release;
    rewrite_tokens(p.topo, p.counts, p.plan, rank, ids, static_cast<int>(k), slots);
  }
  return to_numpy(std::move(slots), {T, k});
}

nb::object counts_from_topk(const AnyArray& topk_array, int num_ranks, int num_experts) {
  check_ndim(topk_array, 2, "topk_ids", "[num_ranks * tokens_per_rank, top_k]");
  ISER_CHECK(num_ranks >= 1 && num_ranks <= kMaxRanks, "num_ranks = {} out of range [1, {}]",
             num_ranks, kMaxRanks);
  ISER_CHECK(num_experts >= 1 && num_experts <= kMaxExperts,
             "num_experts = {} out of range [1, {}]", num_experts, kMaxExperts);
  const size_t T = topk_array.shape(0);
  ISER_CHECK(T % static_cast<size_t>(num_ranks) == 0,
             "topk_ids: {} tokens are not a multiple of num_ranks = {}", T, num_ranks);
  const std::vector<int32_t> ids = read_int32(topk_array, "topk_ids");
  const CountMatrix counts =
      CountMatrix::from_topk(ids, num_ranks, static_cast<int>(T / static_cast<size_t>(num_ranks)),
                             static_cast<int>(topk_array.shape(1)), num_experts);
  const auto values = counts.data();
  return to_numpy(std::vector<int32_t>(values.begin(), values.end()),
                  {static_cast<size_t>(num_ranks), static_cast<size_t>(num_experts)});
}

// Median nanoseconds of `repeats` plans of the same counts in C++ (policy made per call, like
// iser.plan): the baseline of bench/python_plan_overhead.py.
double plan_median_ns(const AnyArray& counts_array, int slots, const std::string& policy_name,
                      int repeats) {
  ISER_CHECK(repeats >= 1, "repeats = {} must be positive", repeats);
  const CountMatrix counts = counts_from_array(counts_array);
  nb::gil_scoped_release release;
  std::vector<double> ns(static_cast<size_t>(repeats));
  int64_t sink = 0;
  for (auto& t : ns) {
    const auto start = std::chrono::steady_clock::now();
    const Topology topo = Topology::make(counts.num_ranks(), counts.num_experts(), slots);
    const auto policy = make_policy(policy_name, topo);
    sink += policy->plan(counts).plan.target;
    t = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  }
  std::nth_element(ns.begin(), ns.begin() + static_cast<ptrdiff_t>(ns.size() / 2), ns.end());
  return sink < 0 ? 0.0 : ns[ns.size() / 2];
}

}  // namespace

void bind_plan(nb::module_& m) {
  auto plan_class =
      nb::class_<PyPlan>(m, "Plan",
                         "One invocation's plan (the result of iser.plan): NumPy fields, to_dict() "
                         "equal to `iser plan --json`, validate()")
          .def_prop_ro("policy", [](const PyPlan& p) { return p.policy; })
          .def_prop_ro("num_ranks", [](const PyPlan& p) { return p.plan.num_ranks; })
          .def_prop_ro("num_experts", [](const PyPlan& p) { return p.plan.num_experts; })
          .def_prop_ro("num_slots", [](const PyPlan& p) { return p.plan.num_slots; })
          .def_prop_ro("g_min", [](const PyPlan& p) { return p.topo.g_min; })
          .def_prop_ro(
              "target", [](const PyPlan& p) { return p.plan.target; }, "T = ceil(total routes / P)")
          .def_prop_ro("owner_uses_home_slot",
                       [](const PyPlan& p) { return p.plan.owner_uses_home_slot; })
          .def_prop_ro("num_broadcasts", [](const PyPlan& p) { return p.plan.broadcasts.size(); })
          .def_prop_ro(
              "loads",
              [](const PyPlan& p) { return to_numpy(p.plan.loads, {p.plan.loads.size()}); },
              "int32 [P]: routes each rank computes after planning")
          .def_prop_ro("broadcasts", &broadcasts_table,
                       "int32 [B, 8]: one row per broadcast, columns Plan.broadcast_fields (mode: "
                       "0 owner-direct, 1 sami, 2 p2p; resident: 0/1)")
          .def_prop_ro("quotas", &quotas_table,
                       "int32 [B, P]: routes of each broadcast's expert that each rank computes")
          .def_prop_ro(
              "counts",
              [](const PyPlan& p) {
                const auto v = p.counts.data();
                return to_numpy(std::vector<int32_t>(v.begin(), v.end()),
                                {static_cast<size_t>(p.counts.num_ranks()),
                                 static_cast<size_t>(p.counts.num_experts())});
              },
              "int32 [P, E]: the count matrix planned for")
          .def(
              "to_dict", [](const PyPlan& p) { return json_loads(plan_json_text(p)); },
              "The plan as `iser plan --json` prints it (with --validate once validated).")
          .def("__repr__",
               [](const PyPlan& p) {
                 return fmt::format("iser.Plan(policy='{}', P={}, E={}, S={}, T={}, {} broadcasts)",
                                    p.policy, p.plan.num_ranks, p.plan.num_experts,
                                    p.plan.num_slots, p.plan.target, p.plan.broadcasts.size());
               })
          .def(
              "validate",
              [](PyPlan& p) {
                check_plan(p.topo, p.counts, p.plan, p.validation);
                p.validated = true;
              },
              "Checks every plan invariant of the policy; raises iser.Error listing violations.");

  plan_class.attr("broadcast_fields") = nb::tuple(
      nb::cast(std::vector<std::string>(std::begin(kBroadcastFields), std::end(kBroadcastFields))));

  // Each entry point takes NumPy/DLPack arrays directly; any other sequence goes through
  // numpy.asarray first (the second overload).
  m.def("plan", &make_plan, nb::arg("counts"), nb::kw_only(), nb::arg("slots") = 4,
        nb::arg("policy") = "halo-q", nb::arg("g_min") = kDefaultGMin, nb::arg("min_move") = 0,
        nb::arg("validate") = false, nb::arg("lsa_size") = 0,
        "Plans one layer invocation from a count matrix counts[P, E] (int32/int64: routes source "
        "rank s sends to expert e), like `iser plan --counts FILE --json`. Returns a Plan.");
  m.def(
      "plan",
      [](nb::handle counts, int slots, const std::string& policy, int g_min, int min_move,
         bool validate, int lsa_size) {
        return make_plan(as_array(counts, "counts"), slots, policy, g_min, min_move, validate,
                         lsa_size);
      },
      nb::arg("counts"), nb::kw_only(), nb::arg("slots") = 4, nb::arg("policy") = "halo-q",
      nb::arg("g_min") = kDefaultGMin, nb::arg("min_move") = 0, nb::arg("validate") = false,
      nb::arg("lsa_size") = 0,
      "Plans one layer invocation from a count matrix counts[P, E] (int32/int64: routes source "
      "rank s sends to expert e), like `iser plan --counts FILE --json`. Returns a Plan.");
  m.def(
      "rewrite",
      [](const PyPlan& p, int rank, nb::handle ids) {
        return rewrite(p, rank, as_array(ids, "topk_ids"));
      },
      nb::arg("plan"), nb::arg("rank"), nb::arg("topk_ids"),
      "Rewrites rank `rank`'s routes topk_ids[num_tokens, top_k] (-1 = none) to global slot ids "
      "rank * (H + S) + local slot; the ids must be the routes the plan's counts hold for it.");
  m.def(
      "counts_from_topk",
      [](nb::handle ids, int num_ranks, int num_experts) {
        return counts_from_topk(as_array(ids, "topk_ids"), num_ranks, num_experts);
      },
      nb::arg("topk_ids"), nb::kw_only(), nb::arg("num_ranks"), nb::arg("num_experts"),
      "Count matrix [P, E] of one invocation: rank r's tokens are rows [r*tau, (r+1)*tau) of "
      "topk_ids[P*tau, top_k] (-1 = none).");
  m.def("_plan_median_ns", &plan_median_ns, nb::arg("counts"), nb::arg("slots"), nb::arg("policy"),
        nb::arg("repeats"));
}

}  // namespace iser::python
