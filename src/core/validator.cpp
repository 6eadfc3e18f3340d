#include "iser/validator.h"

#include <fmt/format.h>

#include <algorithm>

#include "iser/error.h"

namespace iser {
namespace {

class Violations {
 public:
  template <typename... Args>
  void add(fmt::format_string<Args...> format, Args&&... args) {
    lines_.push_back(fmt::format(format, std::forward<Args>(args)...));
  }
  std::vector<std::string> take() { return std::move(lines_); }
  bool empty() const { return lines_.empty(); }

 private:
  std::vector<std::string> lines_;
};

// Shape and group checks of one broadcast; returns false when later checks would index out of
// range.
bool check_broadcast_shape(const Topology& topo, const Broadcast& b, size_t b_idx,
                           const ValidationOptions& options, Violations& v) {
  const int P = topo.num_ranks;
  bool ok = true;
  if (b.expert < 0 || b.expert >= topo.num_experts) {
    v.add("broadcast {}: expert {} out of range [0, {})", b_idx, b.expert, topo.num_experts);
    ok = false;
  } else if (b.owner != topo.owner_of(b.expert)) {
    v.add("broadcast {}: owner {} is not the home rank {} of expert {}", b_idx, b.owner,
          topo.owner_of(b.expert), b.expert);
  }
  if (b.owner < 0 || b.owner >= P) {
    v.add("broadcast {}: owner {} out of range [0, {})", b_idx, b.owner, P);
    ok = false;
  }
  if (b.group_size < 1 || b.group_begin < 0 || b.group_begin + b.group_size > P) {
    v.add("broadcast {}: group [{}, {}) out of range [0, {})", b_idx, b.group_begin,
          b.group_begin + b.group_size, P);
    ok = false;
  }
  if (static_cast<int>(b.quota.size()) != P) {
    v.add("broadcast {}: quota has {} entries, expected P = {}", b_idx, b.quota.size(), P);
    ok = false;
  }
  if (b.helper < 0 || b.helper >= topo.num_slots) {
    v.add("broadcast {}: helper index {} out of range [0, {})", b_idx, b.helper, topo.num_slots);
    ok = false;
  }
  if (!ok) return false;
  if (options.require_aligned_groups) {
    if (b.level < 0 || b.level >= topo.num_levels()) {
      v.add("broadcast {}: level {} is not an aligned level (levels 0..{})", b_idx, b.level,
            topo.num_levels() - 1);
    } else if (b.group_size != topo.group_size(b.level) ||
               b.group_begin % topo.group_size(b.level) != 0) {
      v.add("broadcast {}: group [{}, {}) is not an aligned group of level {} (size {})", b_idx,
            b.group_begin, b.group_begin + b.group_size, b.level, topo.group_size(b.level));
    }
  }
  if (options.require_team_local && topo.num_teams() > 1) {
    const int team = topo.team_of(b.owner);
    if (topo.team_of(b.group_begin) != team ||
        topo.team_of(b.group_begin + b.group_size - 1) != team) {
      v.add(
          "broadcast {}: hosts (group [{}, {}) + owner {}) span more than one LSA team of {} "
          "ranks",
          b_idx, b.group_begin, b.group_begin + b.group_size, b.owner, topo.team_size());
    }
  }
  if (b.mode == TransportMode::kOwnerDirect && !b.owner_in_group()) {
    v.add("broadcast {}: owner-direct transport but owner {} is outside group [{}, {})", b_idx,
          b.owner, b.group_begin, b.group_begin + b.group_size);
  }
  for (int r = 0; r < P; ++r) {
    if (b.quota[r] < 0) v.add("broadcast {}: negative quota {} on rank {}", b_idx, b.quota[r], r);
    if (b.quota[r] != 0 && !b.is_host(r)) {
      v.add("broadcast {}: quota {} on rank {}, which is not a host (group [{}, {}) + owner {})",
            b_idx, b.quota[r], r, b.group_begin, b.group_begin + b.group_size, b.owner);
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> validate_plan(const Topology& topo, const CountMatrix& counts,
                                       const Plan& plan, const ValidationOptions& options) {
  Violations v;
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const int S = topo.num_slots;
  if (plan.num_ranks != P || plan.num_experts != E || plan.num_slots != S) {
    v.add("plan shape P={} E={} S={} does not match topology P={} E={} S={}", plan.num_ranks,
          plan.num_experts, plan.num_slots, P, E, S);
    return v.take();
  }
  if (counts.num_ranks() != P || counts.num_experts() != E) {
    v.add("count matrix {} x {} does not match topology P={} E={}", counts.num_ranks(),
          counts.num_experts(), P, E);
    return v.take();
  }
  if (static_cast<int>(plan.loads.size()) != P) {
    v.add("plan has {} loads, expected P = {}", plan.loads.size(), P);
    return v.take();
  }
  const auto hist = counts.histogram();
  int64_t total = 0;
  for (const int64_t h : hist) total += h;
  const int64_t target = (total + P - 1) / P;
  if (plan.target != target) {
    v.add("plan target T = {}, expected ceil({}/{}) = {}", plan.target, total, P, target);
  }

  const int max_exports = options.max_exports_per_owner < 0 ? topo.max_exports_per_owner()
                                                            : options.max_exports_per_owner;
  std::vector<int> groups_per_rank(P, 0);
  std::vector<int> exports_per_owner(P, 0);
  std::vector<int> slot_user(static_cast<size_t>(P) * std::max(S, 1), -1);
  std::vector<int64_t> quota_sum(E, 0);
  std::vector<int> broadcasts_of_expert(E, 0);
  std::vector<int64_t> loads(P, 0);
  for (size_t b_idx = 0; b_idx < plan.broadcasts.size(); ++b_idx) {
    const Broadcast& b = plan.broadcasts[b_idx];
    if (!check_broadcast_shape(topo, b, b_idx, options, v)) continue;
    ++exports_per_owner[b.owner];
    ++broadcasts_of_expert[b.expert];
    for (int r = b.group_begin; r < b.group_begin + b.group_size; ++r) {
      ++groups_per_rank[r];
      int& user = slot_user[static_cast<size_t>(r) * S + b.helper];
      if (user >= 0) {
        v.add("broadcast {}: helper {} on rank {} already used by broadcast {}", b_idx, b.helper, r,
              user);
      } else {
        user = static_cast<int>(b_idx);
      }
    }
    for (int r = 0; r < P; ++r) {
      quota_sum[b.expert] += b.quota[r];
      loads[r] += b.quota[r];
    }
  }
  for (int r = 0; r < P; ++r) {
    if (groups_per_rank[r] > S) {
      v.add("rank {} is a member of {} groups, more than S = {}", r, groups_per_rank[r], S);
    }
    if (max_exports > 0 && exports_per_owner[r] > max_exports) {
      v.add("owner {} exports {} broadcasts, more than {}", r, exports_per_owner[r], max_exports);
    }
  }
  for (int e = 0; e < E; ++e) {
    if (broadcasts_of_expert[e] == 0) {
      loads[topo.owner_of(e)] += hist[e];
      continue;
    }
    if (options.unique_experts && broadcasts_of_expert[e] > 1) {
      v.add("expert {} is broadcast {} times; this policy exports an expert at most once", e,
            broadcasts_of_expert[e]);
    }
    if (quota_sum[e] != hist[e]) {
      v.add("expert {}: quotas sum to {}, but its routes total hist = {}", e, quota_sum[e],
            hist[e]);
    }
  }
  for (int r = 0; r < P && options.loads_from_quotas; ++r) {
    if (loads[r] != plan.loads[r]) {
      v.add("rank {}: plan load {} differs from the load {} recomputed from quotas", r,
            plan.loads[r], loads[r]);
    }
  }
  return v.take();
}

std::vector<std::string> validate_flows(const CountMatrix& counts,
                                        const std::vector<RouteFlow>& flows) {
  Violations v;
  const int P = counts.num_ranks();
  const int E = counts.num_experts();
  CountMatrix sent(P, E);
  for (size_t i = 0; i < flows.size(); ++i) {
    const RouteFlow& f = flows[i];
    if (f.src_rank < 0 || f.src_rank >= P || f.dst_rank < 0 || f.dst_rank >= P || f.expert < 0 ||
        f.expert >= E) {
      v.add("flow {}: (src {}, expert {}, dst {}) out of range (P = {}, E = {})", i, f.src_rank,
            f.expert, f.dst_rank, P, E);
      continue;
    }
    if (f.routes <= 0) v.add("flow {}: non-positive route count {}", i, f.routes);
    sent.at(f.src_rank, f.expert) += f.routes;
  }
  for (int s = 0; s < P; ++s) {
    for (int e = 0; e < E; ++e) {
      if (sent.at(s, e) != counts.at(s, e)) {
        v.add("rank {} expert {}: flows carry {} routes, the rank has {}", s, e, sent.at(s, e),
              counts.at(s, e));
      }
    }
  }
  return v.take();
}

void check_plan(const Topology& topo, const CountMatrix& counts, const Plan& plan,
                const ValidationOptions& options) {
  const auto violations = validate_plan(topo, counts, plan, options);
  if (violations.empty()) return;
  std::string message = fmt::format("invalid plan ({} violations):", violations.size());
  for (size_t i = 0; i < violations.size() && i < 8; ++i) message += "\n  " + violations[i];
  throw Error(message);
}

}  // namespace iser
