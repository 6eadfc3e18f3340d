// Lower bounds on the best max load under the iser policy's constraints (include/iser/bound.h).
//
// The integer program (minimise M):
//   x[e][G] in {0, 1}   expert e broadcast over aligned group G (groups of one rank that is the
//                       owner itself are left out: they move nothing)
//   q[e][r] in Z, >= 0  routes of e computed by rank r != owner(e)
//   load:     L[r] - sum_{e home of r, m != r} q[e][m] + sum_{e not home of r} q[e][r] <= M
//   slots:    sum_{e, G containing r} x[e][G] <= S                     (every rank r)
//   exports:  sum_{e home of o, G} x[e][G] <= S                         (every owner o)
//   routes:   sum_{r != owner} q[e][r] <= hist[e]                       (the owner computes the
//   rest) shed:     sum_{r != owner} q[e][r] <= hist[e] * sum_G x[e][G]       (moving routes needs
//   a
//             broadcast; implied by cover for integral x, it ties the LP relaxation to the export
//             budget, so the relaxation alone reaches the combinatorial bound)
//   cover:    q[e][r] <= hist[e] * sum_{G containing r} x[e][G]         (r hosts e only in a group)
// Every valid iser plan maps onto a feasible point with M = its max load (quotas summed over an
// expert's broadcasts), and every feasible point is a plan up to slot colouring, which aligned
// groups always allow when each rank is in at most S groups. Experts with no routes get no
// variables (broadcasting them moves nothing).
#include "iser/bound.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "iser/error.h"

#if defined(ISER_HAVE_CBC)
#include <coin/Cbc_C_Interface.h>
#endif

namespace iser {

std::string_view to_string(BoundMethod method) {
  switch (method) {
    case BoundMethod::kCombinatorial:
      return "combinatorial";
    case BoundMethod::kIpOptimal:
      return "ip-optimal";
    case BoundMethod::kIpBound:
      return "ip-bound";
  }
  return "?";
}

bool bound_solver_available() {
#if defined(ISER_HAVE_CBC)
  return true;
#else
  return false;
#endif
}

namespace {

int64_t combinatorial_bound(const Topology& topo, const std::vector<int64_t>& hist,
                            const std::vector<int64_t>& loads, int64_t total) {
  const int P = topo.num_ranks;
  const int H = topo.experts_per_rank();
  int64_t bound = (total + P - 1) / P;
  std::vector<int64_t> home(static_cast<size_t>(H));
  for (int o = 0; o < P; ++o) {
    std::copy_n(hist.begin() + static_cast<ptrdiff_t>(o) * H, H, home.begin());
    const int shed_count = std::min(topo.num_slots, H);
    std::partial_sort(home.begin(), home.begin() + shed_count, home.end(), std::greater<>());
    int64_t shed = 0;
    for (int i = 0; i < shed_count; ++i) shed += home[i];
    bound = std::max(bound, loads[o] - shed);
  }
  return bound;
}

#if defined(ISER_HAVE_CBC)

// The program in compressed sparse columns, built column by column.
struct Program {
  std::vector<CoinBigIndex> start{0};
  std::vector<int> index;
  std::vector<double> value, col_lb, col_ub, obj, row_lb, row_ub;
  std::vector<int> integer_cols;

  int add_row(double lb, double ub) {
    row_lb.push_back(lb);
    row_ub.push_back(ub);
    return static_cast<int>(row_lb.size()) - 1;
  }
  int add_col(double lb, double ub, double cost, bool integer,
              std::initializer_list<std::pair<int, double>> entries) {
    for (const auto& [row, v] : entries) {
      index.push_back(row);
      value.push_back(v);
    }
    start.push_back(static_cast<CoinBigIndex>(index.size()));
    col_lb.push_back(lb);
    col_ub.push_back(ub);
    obj.push_back(cost);
    const int col = static_cast<int>(obj.size()) - 1;
    if (integer) integer_cols.push_back(col);
    return col;
  }
  // Appends an entry to the column added last.
  void extend(int row, double v) {
    index.push_back(row);
    value.push_back(v);
    start.back() = static_cast<CoinBigIndex>(index.size());
  }
};

void solve_program(const Topology& topo, const std::vector<int64_t>& hist,
                   const std::vector<int64_t>& loads, const BoundOptions& options, PlanBound& out) {
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const double S = topo.num_slots;
  int64_t max_home = 0;
  for (const int64_t l : loads) max_home = std::max(max_home, l);
  if (out.lower >= max_home) {  // nothing can beat the home placement
    out.method = BoundMethod::kIpOptimal;
    out.upper = max_home;
    return;
  }
  Program prog;
  std::vector<int> load_row(P), slot_row(P), export_row(P);
  for (int r = 0; r < P; ++r) load_row[r] = prog.add_row(-1e30, -static_cast<double>(loads[r]));
  for (int r = 0; r < P; ++r) slot_row[r] = prog.add_row(-1e30, S);
  for (int r = 0; r < P; ++r) export_row[r] = prog.add_row(-1e30, S);
  // M: integer, between the combinatorial bound and the home max load.
  {
    const int col =
        prog.add_col(static_cast<double>(out.lower), static_cast<double>(max_home), 1, true, {});
    for (int r = 0; r < P; ++r) prog.extend(load_row[r], -1);
    (void)col;
  }
  for (int e = 0; e < E; ++e) {
    if (hist[e] == 0) continue;
    const int o = topo.owner_of(e);
    const double h = static_cast<double>(hist[e]);
    const int routes_row = prog.add_row(-1e30, h);
    const int shed_row = prog.add_row(-1e30, 0);
    std::vector<int> cover_row(P, -1);
    for (int r = 0; r < P; ++r) {
      if (r != o) cover_row[r] = prog.add_row(-1e30, 0);
    }
    for (int level = 0; level < topo.num_levels(); ++level) {
      // Only groups of the owner's LSA team (all groups with one team).
      const int g_first = topo.first_group_of_team(level, o);
      for (int g = g_first; g < g_first + topo.groups_per_team(level); ++g) {
        const int begin = topo.group_begin(level, g);
        const int size = topo.group_size(level);
        if (size == 1 && begin == o) continue;
        prog.add_col(0, 1, 0, true, {{export_row[o], 1}, {shed_row, -h}});
        for (int r = begin; r < begin + size; ++r) {
          prog.extend(slot_row[r], 1);
          if (r != o) prog.extend(cover_row[r], -h);
        }
      }
    }
    for (int r = 0; r < P; ++r) {
      if (r == o) continue;
      prog.add_col(
          0, h, 0, true,
          {{load_row[o], -1}, {load_row[r], 1}, {routes_row, 1}, {shed_row, 1}, {cover_row[r], 1}});
    }
  }

  Cbc_Model* model = Cbc_newModel();
  ISER_CHECK(model != nullptr, "bound: CBC could not create a model");
  struct Deleter {
    Cbc_Model* m;
    ~Deleter() { Cbc_deleteModel(m); }
  } deleter{model};
  Cbc_loadProblem(model, static_cast<int>(prog.obj.size()), static_cast<int>(prog.row_lb.size()),
                  prog.start.data(), prog.index.data(), prog.value.data(), prog.col_lb.data(),
                  prog.col_ub.data(), prog.obj.data(), prog.row_lb.data(), prog.row_ub.data());
  for (const int col : prog.integer_cols) Cbc_setInteger(model, col);
  Cbc_setObjSense(model, 1);
  Cbc_setLogLevel(model, 0);
  Cbc_setMaximumSeconds(model, options.time_limit_s);
  // M is integral, so any plan within less than 1 of the dual bound is optimal.
  Cbc_setAllowableGap(model, 0.999);
  Cbc_solve(model);
  // NOTE: a solver stopped by its time limit before the root relaxation was solved has no bound
  // (and may even call the program infeasible, which it is not: the home placement is a point);
  // the combinatorial bound then stands alone. A dual bound is trusted only after that solve.
  const bool root_solved = Cbc_isInitialSolveProvenOptimal(model) != 0;
  if (!root_solved) {
    ISER_CHECK(Cbc_isSecondsLimitReached(model) || !Cbc_isProvenInfeasible(model),
               "bound: internal error: the program is infeasible (the home placement is a "
               "solution)");
    return;
  }
  if (Cbc_numberSavedSolutions(model) > 0) {
    out.upper = static_cast<int64_t>(std::llround(Cbc_getObjValue(model)));
  }
  // The dual bound is rounded up with a small tolerance for the solver's floating point.
  const auto dual = static_cast<int64_t>(std::ceil(Cbc_getBestPossibleObjValue(model) - 1e-6));
  const int64_t ceiling = out.upper ? *out.upper : max_home;
  out.lower = std::clamp(dual, out.lower, std::max(out.lower, ceiling));
  const bool optimal = Cbc_isProvenOptimal(model) || (out.upper && *out.upper <= out.lower);
  out.method = optimal ? BoundMethod::kIpOptimal : BoundMethod::kIpBound;
  if (optimal && out.upper) out.lower = *out.upper;
}

#endif

}  // namespace

PlanBound plan_bound(const Topology& topo, const CountMatrix& counts, const BoundOptions& options) {
  ISER_CHECK(counts.num_ranks() == topo.num_ranks && counts.num_experts() == topo.num_experts,
             "bound: counts are {} x {}, the topology is P = {}, E = {}", counts.num_ranks(),
             counts.num_experts(), topo.num_ranks, topo.num_experts);
  ISER_CHECK(options.time_limit_s > 0, "bound: time limit {} s must be positive",
             options.time_limit_s);
  const auto hist = counts.histogram();
  const auto loads = counts.home_loads(topo);
  const int64_t total = counts.total();
  PlanBound out;
  out.mean_load = static_cast<double>(total) / topo.num_ranks;
  out.combinatorial = combinatorial_bound(topo, hist, loads, total);
  out.lower = out.combinatorial;
#if defined(ISER_HAVE_CBC)
  if (options.use_solver && topo.num_slots > 0) solve_program(topo, hist, loads, options, out);
#endif
  return out;
}

}  // namespace iser
