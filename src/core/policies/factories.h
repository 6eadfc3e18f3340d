// Factories of the built-in policies (private to core; the public entry is make_policy).
#pragma once

#include <memory>

#include "iser/policy.h"

namespace iser {

std::unique_ptr<Policy> make_none_policy(const Topology& topo, const PolicyOptions& options);
std::unique_ptr<Policy> make_oracle_policy(const Topology& topo, const PolicyOptions& options);

}  // namespace iser
