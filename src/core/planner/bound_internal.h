// Shared by the bound's translation units (bound.cpp, bound_blocks.cpp); not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "iser/error.h"
#include "iser/topology.h"

#if defined(ISER_HAVE_CBC)
#include <coin/Cbc_C_Interface.h>
#endif

namespace iser::bound_detail {

// Owner o's min(S, H) hottest home experts with routes (hist descending, ties: smaller id).
std::vector<int> hottest_home(const Topology& topo, const std::vector<int64_t>& hist, int o);

// keep[r]: the least load rank r keeps of its own routes, L[r] minus its S largest hist.
std::vector<int64_t> keep_loads(const Topology& topo, const std::vector<int64_t>& hist,
                                const std::vector<int64_t>& loads);

// The block program's bound (bound_blocks.cpp): the least max load in [lower, reachable] it
// cannot rule out within `seconds` (lower itself when it rules nothing out). Needs CBC.
int64_t block_bound(const Topology& topo, const std::vector<int64_t>& hist,
                    const std::vector<int64_t>& loads, int64_t lower, int64_t reachable,
                    double seconds);

#if defined(ISER_HAVE_CBC)
// A CBC model, deleted with its scope.
class CbcModel {
 public:
  CbcModel() : model_(Cbc_newModel()) {
    ISER_CHECK(model_ != nullptr, "bound: CBC could not create a model");
  }
  ~CbcModel() { Cbc_deleteModel(model_); }
  CbcModel(const CbcModel&) = delete;
  CbcModel& operator=(const CbcModel&) = delete;
  Cbc_Model* get() const { return model_; }

 private:
  Cbc_Model* model_;
};
#endif

}  // namespace iser::bound_detail
