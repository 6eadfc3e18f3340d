#include "iser/topology.h"

#include "iser/error.h"

namespace iser {

Topology Topology::make(int num_ranks, int num_experts, int num_slots, int g_min, int lsa_size) {
  ISER_CHECK(num_ranks >= 2, "invalid EP degree P = {}: need P >= 2", num_ranks);
  ISER_CHECK(num_ranks <= kMaxRanks, "invalid EP degree P = {}: at most {}", num_ranks, kMaxRanks);
  ISER_CHECK(num_experts > 0 && num_experts <= kMaxExperts,
             "invalid number of experts E = {}: need 1 <= E <= {}", num_experts, kMaxExperts);
  ISER_CHECK(num_experts % num_ranks == 0,
             "E = {} experts cannot be split evenly over P = {} ranks (P must divide E)",
             num_experts, num_ranks);
  ISER_CHECK(num_slots >= 0 && num_slots <= kMaxSlots,
             "invalid helper slots S = {}: need 0 <= S <= {}", num_slots, kMaxSlots);
  ISER_CHECK(g_min >= 1, "invalid g_min = {}: need g_min >= 1", g_min);
  ISER_CHECK(lsa_size >= 0, "invalid LSA team size lsa_size = {}: need lsa_size >= 1", lsa_size);
  ISER_CHECK(lsa_size == 0 || num_ranks % lsa_size == 0,
             "invalid LSA team size lsa_size = {}: it must divide the EP degree P = {}", lsa_size,
             num_ranks);
  return Topology{num_ranks, num_experts, num_slots, g_min, lsa_size == 0 ? num_ranks : lsa_size};
}

int Topology::num_levels() const {
  int levels = 1;
  // Level l >= 1 exists while 2^l divides the team size and team_size >> l >= g_min.
  const int team = team_size();
  while (team % (1 << levels) == 0 && (team >> levels) >= g_min) ++levels;
  return levels;
}

std::vector<int> Topology::group_sizes() const {
  std::vector<int> sizes;
  sizes.reserve(static_cast<size_t>(num_levels()));
  for (int level = 0; level < num_levels(); ++level) sizes.push_back(group_size(level));
  return sizes;
}

}  // namespace iser
