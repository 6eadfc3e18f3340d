// EP topology (docs/design.md §3): P ranks, E routed experts, H = E/P home experts per rank, S
// helper slots per rank, LSA teams, aligned group levels.
#pragma once

#include <cstdint>
#include <vector>

namespace iser {

inline constexpr int kDefaultGMin = 4;
inline constexpr int kMaxRanks = 1024;
inline constexpr int kMaxExperts = 1 << 16;
inline constexpr int kMaxSlots = 64;

struct Topology {
  int num_ranks = 0;    // P
  int num_experts = 0;  // E
  int num_slots = 0;    // S helper slots per rank
  int g_min = kDefaultGMin;
  // LSA team size: ranks are split into teams of lsa_size consecutive ranks, load/store reachable
  // only inside a team (EP over several nodes without multi-node NVLink). 0 means one team of P.
  int lsa_size = 0;

  // Validates (P >= 2, E > 0, P | E, 0 <= S, g_min >= 1, lsa_size = 0 or 1 <= lsa_size with
  // lsa_size | P) and throws iser::Error naming the field. lsa_size = 0 is one team of P.
  static Topology make(int num_ranks, int num_experts, int num_slots, int g_min = kDefaultGMin,
                       int lsa_size = 0);

  int experts_per_rank() const { return num_experts / num_ranks; }       // H
  int slots_per_rank() const { return experts_per_rank() + num_slots; }  // H + S
  int total_slots() const { return num_ranks * slots_per_rank(); }       // P(H+S)
  int owner_of(int expert_idx) const { return expert_idx / experts_per_rank(); }
  int first_home_expert(int rank_idx) const { return rank_idx * experts_per_rank(); }
  int global_slot(int rank_idx, int local_slot_idx) const {
    return rank_idx * slots_per_rank() + local_slot_idx;
  }
  int home_slot(int expert_idx) const {
    return global_slot(owner_of(expert_idx), expert_idx % experts_per_rank());
  }
  int helper_slot(int rank_idx, int helper_idx) const {
    return global_slot(rank_idx, experts_per_rank() + helper_idx);
  }
  // Candidate cap C = min(S, H).
  int max_exports_per_owner() const {
    return num_slots < experts_per_rank() ? num_slots : experts_per_rank();
  }

  // LSA teams of team_size() consecutive ranks; one team of P unless lsa_size says otherwise.
  int team_size() const { return lsa_size > 0 ? lsa_size : num_ranks; }
  int num_teams() const { return num_ranks / team_size(); }
  int team_of(int rank_idx) const { return rank_idx / team_size(); }

  // Aligned groups, formed inside each team: level 0 is a whole team; level l >= 1 exists while
  // 2^l | team_size() and team_size() >> l >= g_min. With one team level 0 is all ranks.
  int num_levels() const;
  int group_size(int level) const { return team_size() >> level; }
  int num_groups(int level) const { return num_teams() << level; }
  int groups_per_team(int level) const { return 1 << level; }
  // The first group of `level` inside the team of `rank_idx` (its groups_per_team are contiguous).
  int first_group_of_team(int level, int rank_idx) const {
    return team_of(rank_idx) * groups_per_team(level);
  }
  int group_begin(int level, int group_idx) const { return group_idx * group_size(level); }
  int group_of(int level, int rank_idx) const { return rank_idx / group_size(level); }
  std::vector<int> group_sizes() const;  // group size per level, coarse to fine
};

}  // namespace iser
