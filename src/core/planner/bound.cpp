// Lower bounds on the best max load under the iser policy's constraints (include/iser/bound.h).
//
// Two reductions hold for some optimal plan, so the bounds may assume them:
//  - an owner broadcasts only its S hottest home experts (hist descending, ties: smaller id):
//    all broadcasts of an expert outside them can be moved to a hotter one nobody broadcasts
//    (one of the S exists, as an owner exports at most S distinct experts) with the same groups
//    and quotas; every load stays the same;
//  - an expert's groups are disjoint: aligned groups that meet are nested, and dropping the inner
//    one (its members keep their quotas through the outer one) only frees slots and exports.
// And for any plan with max load <= M, rank r takes in at most cap[r] = M - keep[r] routes of
// other owners, keep[r] = L[r] minus r's S largest hist (it sheds at most those).
//
// The integer program (minimise M, given a reachable max load U: iser's plan, a MIP start):
//   x[e][G] in {0, 1}   e (an owner's S hottest, hist > 0) broadcast over aligned group G of the
//                       owner's team (the owner alone is left out: it moves nothing)
//   q[e][r] >= 0        routes of e computed by rank r != owner(e) in its team; continuous: for
//                       integral x and M the rest is a transportation problem, whose vertices
//                       are integral, so whole routes lose nothing
//   load:     L[r] - sum_{e home of r, m} q[e][m] + sum_{e not home of r} q[e][r] <= M
//   slots:    sum_{e, G containing r} x[e][G] <= S                     (every rank r)
//   exports:  sum_{e home of o, G} x[e][G] <= S                         (every owner o)
//   routes:   sum_r q[e][r] <= hist[e]                                  (the owner computes the
//   rest) shed:     sum_r q[e][r] <= sum_G min(hist[e], C(G)) x[e][G]         (C(G): the members'
//   cap
//                                                                        at M = U, owner left out)
//   cover:    q[e][r] <= min(hist[e], cap[r] at U) sum_{G containing r} x[e][G]
//   disjoint: sum_{G containing F} x[e][G] <= 1                        (every finest group F)
// Every plan with max load <= U maps onto a feasible point (after the reductions above), and
// every feasible point is a plan up to slot colouring, which aligned groups always allow when
// each rank is in at most S groups.
#include "iser/bound.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "bound_internal.h"
#include "iser/error.h"
#include "iser/planner.h"

namespace iser {

std::string_view to_string(BoundMethod method) {
  switch (method) {
    case BoundMethod::kCombinatorial:
      return "combinatorial";
    case BoundMethod::kBlocks:
      return "blocks";
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

namespace bound_detail {

std::vector<int> hottest_home(const Topology& topo, const std::vector<int64_t>& hist, int o) {
  const int H = topo.experts_per_rank();
  std::vector<int> home(static_cast<size_t>(H));
  for (int i = 0; i < H; ++i) home[i] = o * H + i;
  std::stable_sort(home.begin(), home.end(), [&](int a, int b) { return hist[a] > hist[b]; });
  home.resize(static_cast<size_t>(std::min(topo.num_slots, H)));
  while (!home.empty() && hist[home.back()] == 0) home.pop_back();
  return home;
}

std::vector<int64_t> keep_loads(const Topology& topo, const std::vector<int64_t>& hist,
                                const std::vector<int64_t>& loads) {
  std::vector<int64_t> keep(loads);
  for (int r = 0; r < topo.num_ranks; ++r) {
    for (const int e : hottest_home(topo, hist, r)) keep[r] -= hist[e];
  }
  return keep;
}

}  // namespace bound_detail

namespace {

using bound_detail::hottest_home;
using bound_detail::keep_loads;

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

// The slot-budget bound. For a target max load M, a rank r can take in at most
// cap[r] = M - (L[r] - topS[r]) routes of other owners' experts (its final load is at most M and
// it sheds at most its S largest home experts). A broadcast of owner o over group G therefore
// sheds at most C(G) = sum of cap[r] over G's members other than o, costs |G| helper slots (every
// member, the owner too when it is one) and moves routes of one expert. Owner o above M must shed
// L[o] - M with at most S broadcasts: k broadcasts over groups G_1..G_k shed at most
// min(sum C(G_i), sum of o's k largest hist). Its cheapest such set costs slots_o(M) helper slots;
// as every rank of a team is a member of at most S groups and groups stay inside teams,
// sum over a team's owners of slots_o(M) <= S * team size. M is infeasible when that fails.
class SlotBudget {
 public:
  SlotBudget(const Topology& topo, const std::vector<int64_t>& hist,
             const std::vector<int64_t>& loads)
      : topo_(topo), loads_(loads), keep_(keep_loads(topo, hist, loads)) {
    top_prefix_.assign(static_cast<size_t>(topo.num_ranks),
                       std::vector<int64_t>(topo.num_slots + 1, 0));
    for (int r = 0; r < topo.num_ranks; ++r) {
      const auto top = hottest_home(topo, hist, r);
      for (int k = 1; k <= topo.num_slots; ++k) {
        top_prefix_[r][k] =
            top_prefix_[r][k - 1] + (k <= static_cast<int>(top.size()) ? hist[top[k - 1]] : 0);
      }
    }
  }

  // True when no plan reaches max load M by the slot count.
  bool infeasible(int64_t M) {
    const int P = topo_.num_ranks;
    cap_.resize(P);
    for (int r = 0; r < P; ++r) cap_[r] = std::max<int64_t>(0, M - keep_[r]);
    const int64_t budget = static_cast<int64_t>(topo_.num_slots) * topo_.team_size();
    for (int team = 0; team < topo_.num_teams(); ++team) {
      int64_t used = 0;
      for (int o = team * topo_.team_size(); o < (team + 1) * topo_.team_size(); ++o) {
        if (loads_[o] <= M) continue;
        const int64_t cost = owner_slots(o, loads_[o] - M);
        if (cost < 0) return true;
        used += cost;
        if (used > budget) return true;
      }
    }
    return false;
  }

 private:
  // The fewest helper slots with which owner o can shed `need` routes, or -1 when it cannot.
  int64_t owner_slots(int o, int64_t need) {
    const int S = topo_.num_slots;
    const int levels = topo_.num_levels();
    // The largest C(G) per level (coarser groups contain finer ones, so capacities only grow).
    level_cap_.assign(levels, 0);
    for (int level = 0; level < levels; ++level) {
      const int size = topo_.group_size(level);
      const int g_first = topo_.first_group_of_team(level, o);
      for (int g = g_first; g < g_first + topo_.groups_per_team(level); ++g) {
        const int begin = topo_.group_begin(level, g);
        int64_t c = 0;
        for (int r = begin; r < begin + size; ++r) c += r == o ? 0 : cap_[r];
        level_cap_[level] = std::max(level_cap_[level], c);
      }
    }
    int64_t best = -1;
    for (int k = 1; k <= S; ++k) {
      if (top_prefix_[o][k] < need) continue;
      const int64_t cost = cheapest_cover(k, need);
      if (cost >= 0 && (best < 0 || cost < best)) best = cost;
    }
    return best;
  }

  // The least sum of group sizes over k broadcasts (levels with repetition) whose capacities
  // reach `need`, or -1. Exact enumeration for small k; past it the fractional relaxation (each
  // slot of level l carries at most level_cap / size), which is a lower bound as well.
  int64_t cheapest_cover(int k, int64_t need) {
    const int levels = topo_.num_levels();
    if (k > kExactBroadcasts) {
      double best_ratio = 0;  // capacity per slot
      int64_t total = 0;
      for (int level = 0; level < levels; ++level) {
        best_ratio =
            std::max(best_ratio, static_cast<double>(level_cap_[level]) / topo_.group_size(level));
        total = std::max(total, level_cap_[level]);
      }
      if (total * k < need) return -1;
      const int64_t finest = topo_.group_size(levels - 1);
      // NOTE: rounded down, so floating point can only weaken the bound.
      const auto fractional = static_cast<int64_t>(std::floor(need / best_ratio * (1 - 1e-12)));
      return std::max(finest, fractional);
    }
    int64_t best = -1;
    // Levels chosen in non-decreasing order; `from` is the first level still allowed.
    std::function<void(int, int, int64_t, int64_t)> pick = [&](int left, int from, int64_t cap,
                                                               int64_t cost) {
      if (best >= 0 && cost >= best) return;
      if (left == 0) {
        if (cap >= need) best = cost;
        return;
      }
      for (int level = from; level < levels; ++level) {
        pick(left - 1, level, cap + level_cap_[level], cost + topo_.group_size(level));
      }
    };
    pick(k, 0, 0, 0);
    return best;
  }

  static constexpr int kExactBroadcasts = 6;
  const Topology& topo_;
  const std::vector<int64_t>& loads_;
  const std::vector<int64_t> keep_;
  std::vector<int64_t> cap_, level_cap_;
  std::vector<std::vector<int64_t>> top_prefix_;
};

// The least M the slot budget allows, searched between a proven lower bound and a max load
// known to be reachable (feasibility only grows with M).
int64_t slot_budget_bound(const Topology& topo, const std::vector<int64_t>& hist,
                          const std::vector<int64_t>& loads, int64_t lower, int64_t reachable) {
  if (topo.num_slots == 0 || lower >= reachable) return lower;
  SlotBudget budget(topo, hist, loads);
  int64_t lo = lower, hi = reachable;  // lo may be infeasible by slots, hi is reachable
  if (!budget.infeasible(lo)) return lo;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (budget.infeasible(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return hi;
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

// The program's columns for one count matrix, with the indices a MIP start needs.
struct Columns {
  int m = -1;
  std::vector<int> x_first;  // per expert: its first x column (-1: no variables), levels in order
  std::vector<int> q_first;  // per expert: q[e][team's first rank] (the owner's entry unused)
};

Columns build_program(const Topology& topo, const std::vector<int64_t>& hist,
                      const std::vector<int64_t>& loads, const std::vector<int64_t>& keep,
                      int64_t lower, int64_t reachable, Program& prog) {
  const int P = topo.num_ranks;
  const int team = topo.team_size();
  const int finest = topo.num_levels() - 1;
  const double S = topo.num_slots;
  std::vector<double> cap(P);
  for (int r = 0; r < P; ++r)
    cap[r] = static_cast<double>(std::max<int64_t>(0, reachable - keep[r]));
  std::vector<int> load_row(P), slot_row(P), export_row(P);
  for (int r = 0; r < P; ++r) load_row[r] = prog.add_row(-1e30, -static_cast<double>(loads[r]));
  for (int r = 0; r < P; ++r) slot_row[r] = prog.add_row(-1e30, S);
  for (int r = 0; r < P; ++r) export_row[r] = prog.add_row(-1e30, S);
  Columns cols;
  cols.x_first.assign(topo.num_experts, -1);
  cols.q_first.assign(topo.num_experts, -1);
  cols.m = prog.add_col(static_cast<double>(lower), static_cast<double>(reachable), 1, true, {});
  for (int r = 0; r < P; ++r) prog.extend(load_row[r], -1);
  for (int o = 0; o < P; ++o) {
    const int first_rank = topo.team_of(o) * team;
    for (const int e : hottest_home(topo, hist, o)) {
      const double h = static_cast<double>(hist[e]);
      const int routes_row = prog.add_row(-1e30, h);
      const int shed_row = prog.add_row(-1e30, 0);
      std::vector<int> cover_row(team, -1), disjoint_row(topo.groups_per_team(finest));
      for (int i = 0; i < team; ++i) {
        if (first_rank + i != o) cover_row[i] = prog.add_row(-1e30, 0);
      }
      for (int& row : disjoint_row) row = prog.add_row(-1e30, 1);
      cols.x_first[e] = static_cast<int>(prog.obj.size());
      for (int level = 0; level <= finest; ++level) {
        const int size = topo.group_size(level);
        const int g_first = topo.first_group_of_team(level, o);
        for (int g = g_first; g < g_first + topo.groups_per_team(level); ++g) {
          const int begin = topo.group_begin(level, g);
          if (size == 1 && begin == o) continue;
          double room = 0;
          for (int r = begin; r < begin + size; ++r) room += r == o ? 0 : cap[r];
          prog.add_col(0, 1, 0, true, {{export_row[o], 1}, {shed_row, -std::min(h, room)}});
          for (int r = begin; r < begin + size; ++r) {
            prog.extend(slot_row[r], 1);
            if (r != o) prog.extend(cover_row[r - first_rank], -std::min(h, cap[r]));
          }
          const int finest_size = topo.group_size(finest);
          for (int f = begin; f < begin + size; f += finest_size) {
            prog.extend(disjoint_row[(f - first_rank) / finest_size], 1);
          }
        }
      }
      cols.q_first[e] = static_cast<int>(prog.obj.size());
      for (int i = 0; i < team; ++i) {
        const int r = first_rank + i;
        const double ub = r == o ? 0 : std::min(h, cap[r]);
        if (r == o) {
          prog.add_col(0, 0, 0, false, {});
          continue;
        }
        prog.add_col(0, ub, 0, false,
                     {{load_row[o], -1},
                      {load_row[r], 1},
                      {routes_row, 1},
                      {shed_row, 1},
                      {cover_row[i], 1}});
      }
    }
  }
  return cols;
}

// A MIP start from a plan (max load `plan_max`), or nothing when the plan leaves the program's
// reductions (a broadcast of an expert without variables, groups of one expert that meet).
bool mip_start(const Topology& topo, const Plan& plan, int64_t plan_max, const Columns& cols,
               size_t num_cols, std::vector<int>& idx, std::vector<double>& val) {
  std::vector<double> values(num_cols, 0.0);
  values[cols.m] = static_cast<double>(plan_max);
  const int team = topo.team_size();
  for (const Broadcast& b : plan.broadcasts) {
    const int e = b.expert;
    if (cols.x_first[e] < 0) return false;
    const int o = topo.owner_of(e);
    int col = cols.x_first[e];
    bool found = false;
    for (int level = 0; level < topo.num_levels() && !found; ++level) {
      const int size = topo.group_size(level);
      const int g_first = topo.first_group_of_team(level, o);
      for (int g = g_first; g < g_first + topo.groups_per_team(level); ++g) {
        const int begin = topo.group_begin(level, g);
        if (size == 1 && begin == o) continue;
        if (begin == b.group_begin && size == b.group_size) {
          found = true;
          break;
        }
        ++col;
      }
    }
    if (!found || values[col] != 0) return false;
    values[col] = 1;
    const int first_rank = topo.team_of(o) * team;
    for (int r = b.group_begin; r < b.group_begin + b.group_size; ++r) {
      if (r != o) values[cols.q_first[e] + r - first_rank] += b.quota[r];
    }
  }
  for (size_t c = 0; c < num_cols; ++c) {
    if (values[c] != 0) {
      idx.push_back(static_cast<int>(c));
      val.push_back(values[c]);
    }
  }
  return true;
}

void solve_program(const Topology& topo, const std::vector<int64_t>& hist,
                   const std::vector<int64_t>& loads, const Plan& start, double seconds,
                   PlanBound& out) {
  const int64_t reachable = *out.upper;  // the best plan known (iser's, the block search's)
  const int64_t start_max = *std::max_element(start.loads.begin(), start.loads.end());
  const auto keep = keep_loads(topo, hist, loads);
  Program prog;
  const Columns cols = build_program(topo, hist, loads, keep, out.lower, reachable, prog);

  const bound_detail::CbcModel owned;
  Cbc_Model* model = owned.get();
  Cbc_loadProblem(model, static_cast<int>(prog.obj.size()), static_cast<int>(prog.row_lb.size()),
                  prog.start.data(), prog.index.data(), prog.value.data(), prog.col_lb.data(),
                  prog.col_ub.data(), prog.obj.data(), prog.row_lb.data(), prog.row_ub.data());
  for (const int col : prog.integer_cols) Cbc_setInteger(model, col);
  std::vector<int> start_idx;
  std::vector<double> start_val;
  if (start_max <= reachable &&
      mip_start(topo, start, start_max, cols, prog.obj.size(), start_idx, start_val)) {
    Cbc_setMIPStartI(model, static_cast<int>(start_idx.size()), start_idx.data(), start_val.data());
  }
  Cbc_setObjSense(model, 1);
  Cbc_setLogLevel(model, 0);
  Cbc_setMaximumSeconds(model, seconds);
  // M is integral, so any plan within less than 1 of the dual bound is optimal.
  Cbc_setAllowableGap(model, 0.999);
  Cbc_solve(model);
  // NOTE: a solver stopped by its time limit before the root relaxation was solved has no bound
  // (and may even call the program infeasible, which it is not: the start plan is a point); the
  // combinatorial bound then stands alone. A dual bound is trusted only after that solve, or
  // with a proof of optimality (preprocessing may solve the program without a root solve).
  const bool proven = Cbc_isProvenOptimal(model) && Cbc_numberSavedSolutions(model) > 0;
  if (!proven && !Cbc_isInitialSolveProvenOptimal(model)) {
    ISER_CHECK(Cbc_isSecondsLimitReached(model) || !Cbc_isProvenInfeasible(model),
               "bound: internal error: the program is infeasible (the start plan is a solution)");
    return;
  }
  if (Cbc_numberSavedSolutions(model) > 0) {
    out.upper = std::min(*out.upper, static_cast<int64_t>(std::llround(Cbc_getObjValue(model))));
  }
  // The dual bound is rounded up with a small tolerance for the solver's floating point.
  const auto dual = static_cast<int64_t>(std::ceil(Cbc_getBestPossibleObjValue(model) - 1e-6));
  out.lower = std::clamp(dual, out.lower, std::max(out.lower, *out.upper));
  const bool optimal = proven || *out.upper <= out.lower;
  out.method = optimal ? BoundMethod::kIpOptimal : BoundMethod::kIpBound;
  if (optimal) out.lower = *out.upper;
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
  // iser's plan: a reachable max load for the searches and the solver's start.
  const Plan start = plan_iser(topo, counts);
  const int64_t reachable =
      std::min<int64_t>(*std::max_element(start.loads.begin(), start.loads.end()),
                        *std::max_element(loads.begin(), loads.end()));
  out.combinatorial = slot_budget_bound(topo, hist, loads,
                                        combinatorial_bound(topo, hist, loads, total), reachable);
  out.lower = out.combinatorial;
  out.upper = reachable;
  if (out.lower >= reachable) {
    return out;  // proven optimal by the combinatorial bounds
  }
#if defined(ISER_HAVE_CBC)
  if (!options.use_solver) return out;
  const auto began = std::chrono::steady_clock::now();
  bound_detail::BlockSearch search = bound_detail::block_search(
      topo, counts, hist, loads, out.lower, reachable, options.time_limit_s / 2);
  out.blocks = search.lower;
  if (out.blocks > out.lower) {
    out.lower = out.blocks;
    out.method = BoundMethod::kBlocks;
  }
  if (search.plan) {
    out.upper = *std::max_element(search.plan->loads.begin(), search.plan->loads.end());
    out.plan = std::move(search.plan);
  }
  if (out.lower >= *out.upper) return out;  // the best plan known is optimal
  const double spent =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  solve_program(topo, hist, loads, out.plan ? *out.plan : start,
                std::max(options.time_limit_s - spent, 0.01), out);
#endif
  return out;
}

}  // namespace iser
