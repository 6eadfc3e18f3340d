// The block program: a relaxation of the bound's integer program (bound.cpp) over blocks, the
// finest aligned groups, which CBC closes where the program over ranks stalls: when nearly every
// helper slot is needed, the question is which broadcasts use them, not how routes spread over
// ranks inside a block.
//
// Every aligned group is a union of blocks and every rank of a block is a member of the same
// groups, so a block is a member of at most S groups (the slot constraint, exact). For a target
// max load M, summing the load constraint over a block's ranks gives
//   (routes computed in b for owners outside b) - (routes of b's owners computed outside b)
//     <= R[b] = sum over r in b of (M - L[r])
// (routes that stay inside a block cancel). The program keeps, per owner above M ("hot"), its S
// hottest experts (the reduction of bound.cpp) with one binary per aligned group, disjoint groups
// per expert, and its routes per block; the owners at or below M of a block are merged into one
// relay source: any number of broadcasts, each shipping at most the largest hist among their S
// hottest experts, at most the sum of those hists in all. Rows:
//   layers:  sum over broadcasts whose group contains b (hot and relay) <= S      (every block)
//   net:     inflow(b) - outflow(b) <= R[b]                                       (every block)
//   intake:  routes computed in b for other ranks <= sum over r in b of cap[r]    (every block)
//   exports: k_o <= broadcasts of hot owner o <= S, where k_o is the fewest of its hottest
//            experts whose routes reach L[o] - M (a cut: fewer cannot shed enough)
//   shed:    routes of o computed by other ranks >= L[o] - M
//   cover:   routes of e in b <= min(hist[e], cap of b's members) * (groups of e containing b)
// A plan with max load <= M maps onto a feasible point (hot broadcasts as they are, the other
// owners' broadcasts counted per block, groups of only the owner's own block dropped: they move
// routes inside the block), so an infeasible program proves M unreachable. Teams are independent
// (groups stay inside them): M is unreachable when one team's program is infeasible.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "bound_internal.h"
#include "iser/error.h"

namespace iser::bound_detail {

#if defined(ISER_HAVE_CBC)

namespace {

enum class Outcome { kInfeasible, kFeasible, kUnknown };

// One linear row, collected before it goes to CBC.
struct Row {
  std::vector<int> cols;
  std::vector<double> coefs;
  void add(int col, double coef) {
    cols.push_back(col);
    coefs.push_back(coef);
  }
};

class BlockProgram {
 public:
  BlockProgram(const Topology& topo, const std::vector<int64_t>& hist,
               const std::vector<int64_t>& loads, const std::vector<int64_t>& keep, int team)
      : topo_(topo), hist_(hist), loads_(loads), keep_(keep) {
    const int levels = topo.num_levels();
    block_size_ = topo.group_size(levels - 1);
    first_rank_ = team * topo.team_size();
    num_blocks_ = topo.team_size() / block_size_;
    for (int level = 0; level < levels; ++level) {
      const int g_first = topo.first_group_of_team(level, first_rank_);
      for (int g = g_first; g < g_first + topo.groups_per_team(level); ++g) {
        const int begin = topo.group_begin(level, g) - first_rank_;
        groups_.push_back(
            {begin / block_size_, (begin + topo.group_size(level)) / block_size_, level});
      }
    }
  }

  // True when CBC proves that no plan reaches max load M within `seconds`.
  bool infeasible(int64_t M, double seconds) {
    return solve(M, seconds, /*relays=*/true, nullptr) == Outcome::kInfeasible;
  }

  // The program at max load M; without relays, a feasible point is a set of hot broadcasts
  // (appended to `chosen`) that a plan can be built on (bound_plan.cpp).
  Outcome solve(int64_t M, double seconds, bool relays, std::vector<BlockBroadcast>* chosen) {
    const CbcModel owned;
    Cbc_Model* model = owned.get();
    model_ = model;
    num_cols_ = 0;
    const int team_end = first_rank_ + topo_.team_size();
    cap_.assign(static_cast<size_t>(topo_.team_size()), 0);
    for (int r = first_rank_; r < team_end; ++r) {
      cap_[r - first_rank_] = std::max<int64_t>(0, M - keep_[r]);
    }
    x_cols_.clear();
    layers_.assign(num_blocks_, Row{});
    net_.assign(num_blocks_, Row{});
    intake_.assign(num_blocks_, Row{});
    team_layers_ = Row{};
    bool any_hot = false;
    for (int o = first_rank_; o < team_end; ++o) {
      if (loads_[o] <= M) continue;
      any_hot = true;
      // Its hottest experts hold too few routes.
      if (!add_hot_owner(o, M)) return Outcome::kInfeasible;
    }
    if (!any_hot) return Outcome::kFeasible;
    for (int b = 0; b < num_blocks_ && relays; ++b) add_relay_source(b, M);
    for (int b = 0; b < num_blocks_; ++b) {
      int64_t room = 0;
      for (int r = block_begin(b); r < block_begin(b) + block_size_; ++r) room += M - loads_[r];
      // NOTE: R[b] + 1/2 and the shed row's L[o] - M - 1/2 give the solver's floating-point
      // tolerance room on the side that can only weaken the proof.
      emit(layers_[b], 'L', topo_.num_slots);
      emit(net_[b], 'L', static_cast<double>(room) + 0.5);
      emit(intake_[b], 'L', static_cast<double>(block_cap(b, -1)));
    }
    emit(team_layers_, 'L', static_cast<double>(topo_.num_slots) * num_blocks_);
    Cbc_setLogLevel(model, 0);
    Cbc_setMaximumSeconds(model, std::max(seconds, 0.01));
    Cbc_solve(model);
    const bool stopped = Cbc_isSecondsLimitReached(model) || Cbc_isAbandoned(model);
    if (!stopped &&
        (Cbc_isProvenInfeasible(model) || Cbc_isInitialSolveProvenPrimalInfeasible(model))) {
      return Outcome::kInfeasible;
    }
    if (Cbc_numberSavedSolutions(model) == 0) return Outcome::kUnknown;
    if (chosen != nullptr) {
      const double* x = Cbc_getColSolution(model);
      for (const XCol& c : x_cols_) {
        if (x[c.col] < 0.5) continue;
        const Group& g = groups_[c.group];
        chosen->push_back({c.expert, g.level, block_begin(g.first_block),
                           (g.end_block - g.first_block) * block_size_});
      }
    }
    return Outcome::kFeasible;
  }

 private:
  struct Group {
    int first_block, end_block, level;
    bool contains(int b) const { return first_block <= b && b < end_block; }
  };

  int block_begin(int b) const { return first_rank_ + b * block_size_; }
  int block_of(int r) const { return (r - first_rank_) / block_size_; }
  // The members' cap of block b, rank `skip` left out.
  int64_t block_cap(int b, int skip) const {
    int64_t c = 0;
    for (int r = block_begin(b); r < block_begin(b) + block_size_; ++r) {
      c += r == skip ? 0 : cap_[r - first_rank_];
    }
    return c;
  }
  int add_col(double lb, double ub, bool integer) {
    Cbc_addCol(model_, "", lb, ub, 0.0, integer ? 1 : 0, 0, nullptr, nullptr);
    return num_cols_++;
  }
  void emit(const Row& row, char sense, double rhs) {
    if (row.cols.empty()) return;
    Cbc_addRow(model_, "", static_cast<int>(row.cols.size()), row.cols.data(), row.coefs.data(),
               sense, rhs);
  }
  // A broadcast column over group g: its layers in every block of g and in the team's sum.
  void count_layers(int col, const Group& g) {
    for (int b = g.first_block; b < g.end_block; ++b) layers_[b].add(col, 1);
    team_layers_.add(col, g.end_block - g.first_block);
  }

  // Owner o above M: its hottest experts' groups and routes per block. False when even all of
  // them cannot shed L[o] - M.
  bool add_hot_owner(int o, int64_t M) {
    const int64_t need = loads_[o] - M;
    const auto top = hottest_home(topo_, hist_, o);
    int fewest = 0;
    for (int64_t prefix = 0; prefix < need; ++fewest) {
      if (fewest == static_cast<int>(top.size())) return false;
      prefix += hist_[top[fewest]];
    }
    const int home_block = block_of(o);
    Row exports, shed;
    // What e's routes can take of each block: its hist, and the cap of o's fellow members.
    std::vector<double> reach(num_blocks_);
    for (const int e : top) {
      const auto h = static_cast<double>(hist_[e]);
      for (int b = 0; b < num_blocks_; ++b) {
        reach[b] = std::min(h, static_cast<double>(block_cap(b, o)));
      }
      std::vector<Row> cover(num_blocks_), disjoint(num_blocks_);
      for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        // A group of the owner alone moves nothing.
        if (block_size_ == 1 && g.end_block - g.first_block == 1 && g.first_block == home_block) {
          continue;
        }
        const int x = add_col(0, 1, true);
        x_cols_.push_back({x, e, static_cast<int>(gi)});
        exports.add(x, 1);
        count_layers(x, g);
        for (int b = g.first_block; b < g.end_block; ++b) {
          disjoint[b].add(x, 1);
          cover[b].add(x, -reach[b]);
        }
      }
      Row routes;
      for (int b = 0; b < num_blocks_; ++b) {
        const int f = add_col(0, reach[b], false);
        cover[b].add(f, 1);
        routes.add(f, 1);
        shed.add(f, 1);
        intake_[b].add(f, 1);
        if (b != home_block) {
          net_[b].add(f, 1);
          net_[home_block].add(f, -1);
        }
        emit(cover[b], 'L', 0);
        emit(disjoint[b], 'L', 1);
      }
      emit(routes, 'L', h);
    }
    emit(exports, 'L', topo_.num_slots);
    emit(exports, 'G', fewest);
    emit(shed, 'G', static_cast<double>(need) - 0.5);
    return true;
  }

  // The owners of block b at or below M, merged: broadcasts over groups reaching other blocks.
  void add_relay_source(int b, int64_t M) {
    int64_t largest = 0, total = 0;
    int sources = 0;
    for (int o = block_begin(b); o < block_begin(b) + block_size_; ++o) {
      if (loads_[o] > M) continue;
      const auto top = hottest_home(topo_, hist_, o);
      for (const int e : top) {
        largest = std::max(largest, hist_[e]);
        total += hist_[e];
      }
      sources += top.empty() ? 0 : 1;
    }
    if (sources == 0) return;
    std::vector<int> z;
    std::vector<const Group*> z_group;
    Row out;
    for (const Group& g : groups_) {
      if (g.end_block - g.first_block == 1 && g.first_block == b) continue;  // stays inside b
      const int col = add_col(0, static_cast<double>(topo_.num_slots) * sources, true);
      count_layers(col, g);
      out.add(col, -static_cast<double>(largest));
      z.push_back(col);
      z_group.push_back(&g);
    }
    Row out_total;
    for (int target = 0; target < num_blocks_; ++target) {
      if (target == b) continue;
      const int f = add_col(0, static_cast<double>(std::min(total, block_cap(target, -1))), false);
      Row cover;
      cover.add(f, 1);
      for (size_t i = 0; i < z.size(); ++i) {
        if (z_group[i]->contains(target)) cover.add(z[i], -static_cast<double>(largest));
      }
      emit(cover, 'L', 0);
      out.add(f, 1);
      out_total.add(f, 1);
      net_[target].add(f, 1);
      net_[b].add(f, -1);
      intake_[target].add(f, 1);
    }
    emit(out, 'L', 0);
    emit(out_total, 'L', static_cast<double>(total));
  }

  const Topology& topo_;
  const std::vector<int64_t>& hist_;
  const std::vector<int64_t>& loads_;
  const std::vector<int64_t>& keep_;
  int block_size_ = 1, first_rank_ = 0, num_blocks_ = 0;
  struct XCol {
    int col, expert, group;
  };
  std::vector<Group> groups_;
  std::vector<XCol> x_cols_;
  Cbc_Model* model_ = nullptr;
  int num_cols_ = 0;
  std::vector<int64_t> cap_;
  std::vector<Row> layers_, net_, intake_;
  Row team_layers_;
};

}  // namespace

BlockSearch block_search(const Topology& topo, const CountMatrix& counts,
                         const std::vector<int64_t>& hist, const std::vector<int64_t>& loads,
                         int64_t lower, int64_t reachable, double seconds) {
  BlockSearch out{lower, std::nullopt};
  if (topo.num_slots == 0 || lower >= reachable) return out;
  using Clock = std::chrono::steady_clock;
  const auto began = Clock::now();
  auto left = [&](double share) {
    return share * seconds - std::chrono::duration<double>(Clock::now() - began).count();
  };
  const auto keep = keep_loads(topo, hist, loads);
  std::vector<BlockProgram> teams;
  for (int t = 0; t < topo.num_teams(); ++t) teams.emplace_back(topo, hist, loads, keep, t);
  // The bound, in the first half of the time. True only when proven; a check past its share
  // of the time proves nothing.
  auto unreachable = [&](int64_t M) {
    for (BlockProgram& team : teams) {
      if (left(0.5) <= 0) return false;
      if (team.infeasible(M, left(0.5))) return true;
    }
    return false;
  };
  // The plan known is often optimal: one check proves it. Then the bisection keeps `lo`
  // unreachable (proven, or the given bound minus one) and `hi` not ruled out.
  if (unreachable(reachable - 1)) {
    out.lower = reachable;
    return out;
  }
  int64_t lo = lower - 1, hi = reachable - 1;
  if (unreachable(lower)) {
    lo = lower;
    while (hi - lo > 1 && left(0.5) > 0) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (unreachable(mid)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
  }
  out.lower = lo + 1;
  // A plan, in the rest of the time: the program without relays at a max load M gives hot
  // broadcasts, and plan_over the best quotas over them (not always <= M: the program is a
  // relaxation). M is bisected between the bound and the best plan known.
  int64_t best = reachable;
  lo = out.lower - 1;
  hi = reachable;
  while (hi - lo > 1 && left(1.0) > 0) {
    const int64_t mid = lo + (hi - lo) / 2;
    std::vector<BlockBroadcast> chosen;
    bool feasible = true;
    for (BlockProgram& team : teams) {
      feasible = feasible && left(1.0) > 0 &&
                 team.solve(mid, left(1.0), /*relays=*/false, &chosen) == Outcome::kFeasible;
    }
    if (!feasible) {
      lo = mid;
      continue;
    }
    hi = mid;
    Plan plan = plan_over(topo, counts, chosen);
    const int64_t max_load = *std::max_element(plan.loads.begin(), plan.loads.end());
    if (max_load < best) {
      best = max_load;
      out.plan = std::move(plan);
    }
  }
  return out;
}

#else

BlockSearch block_search(const Topology&, const CountMatrix&, const std::vector<int64_t>&,
                         const std::vector<int64_t>&, int64_t lower, int64_t, double) {
  return {lower, std::nullopt};
}

#endif

}  // namespace iser::bound_detail
