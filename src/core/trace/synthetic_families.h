// The skew families (synthetic_families.cpp): named generators of one shape of imbalance each.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "iser/trace.h"

namespace iser::trace {

// True for "zipf-<A>" and the fixed family names.
bool is_skew_family(std::string_view kind);
// The documented members: zipf-0.6 ... zipf-1.5, then the fixed families.
std::vector<std::string> skew_family_names();
std::unique_ptr<RoutingSource> make_skew_family(const SyntheticOptions& options);

}  // namespace iser::trace
