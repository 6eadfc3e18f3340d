// Factories of the built-in policies (private to core; the public entry is make_policy).
#pragma once

#include <memory>

#include "iser/policy.h"

namespace iser {

std::unique_ptr<Policy> make_none_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_oracle_policy(const Topology& topo, const PolicyOptions& options);

// HALO-Q family (policies/halo_q.cpp).
std::unique_ptr<Policy> make_halo_q_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_owner_home_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_absorb_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_resident_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_halo_q_owner_in_policy(const Topology& topo,
                                                    const PolicyOptions& options);
std::unique_ptr<Policy> make_iser_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_iser_stateless_policy(const Topology& topo,
                                                   const PolicyOptions& options);

// Baselines (docs/design.md §6): policies/eplb_static.cpp, all_rank.cpp, p2p.cpp.
std::unique_ptr<Policy> make_eplb_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_eplb_window_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_eplb_oracle_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_eplb_equal_mem_policy(const Topology& topo,
                                                   const PolicyOptions& options);
std::unique_ptr<Policy> make_all_rank_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_all_rank_balanced_policy(const Topology& topo,
                                                      const PolicyOptions& options);
std::unique_ptr<Policy> make_p2p_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_p2p_limited_policy(const Topology& topo, const PolicyOptions& options);

}  // namespace iser
