// Shared by the bound's translation units (bound.cpp, bound_blocks.cpp); not installed.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"

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

// A broadcast the block program chose: `expert` over the aligned group
// [group_begin, group_begin + group_size) of `level`.
struct BlockBroadcast {
  int expert = 0, level = 0, group_begin = 0, group_size = 0;
};

struct BlockSearch {
  int64_t lower = 0;         // no plan has a max load below this
  std::optional<Plan> plan;  // a valid iser plan below `reachable`, when the search found one
};

// The block program (bound_blocks.cpp), within `seconds`: the least max load in [lower,
// reachable] it cannot rule out (lower itself when it rules nothing out), then, from its points
// without relays, the best plan over their broadcasts (plan_over). Needs CBC: without it,
// {lower, nothing}.
BlockSearch block_search(const Topology& topo, const CountMatrix& counts,
                         const std::vector<int64_t>& hist, const std::vector<int64_t>& loads,
                         int64_t lower, int64_t reachable, double seconds);

// The plan over exactly these broadcasts (bound_plan.cpp) with the least max load: quotas by a
// maximum flow (experts to hosts, each rank's load capped), bisected over the cap; helper slots
// coloured, transport assigned. The broadcasts must keep iser's constraints (aligned groups,
// every rank in at most S groups, at most S per owner, an expert's groups disjoint).
Plan plan_over(const Topology& topo, const CountMatrix& counts,
               const std::vector<BlockBroadcast>& broadcasts);

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
