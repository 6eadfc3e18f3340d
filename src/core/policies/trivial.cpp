// `none` (no balancing) and `oracle` (perfect split at no copy cost): the two ends every
// balancing policy is measured between.
#include "policies/factories.h"

namespace iser {
namespace {

class NonePolicy final : public Policy {
 public:
  explicit NonePolicy(const Topology& topo) : topo_(topo) {}
  std::string_view name() const override { return "none"; }
  PolicyResult plan(const CountMatrix& counts) override {
    PolicyResult result;
    result.plan = make_empty_plan(topo_, counts);
    result.flows = home_flows(topo_, counts);
    return result;
  }

 private:
  Topology topo_;
};

// Perfect split: loads differ by at most one route (max load = T). No routes are placed, so
// send-out/receive-in are not defined for it.
class OraclePolicy final : public Policy {
 public:
  explicit OraclePolicy(const Topology& topo) : topo_(topo) {}
  std::string_view name() const override { return "oracle"; }
  ValidationOptions validation() const override { return {.enabled = false}; }
  PolicyResult plan(const CountMatrix& counts) override {
    PolicyResult result;
    result.plan = make_empty_plan(topo_, counts);
    const int64_t total = counts.total();
    const int64_t base = total / topo_.num_ranks;
    const int64_t extra = total % topo_.num_ranks;
    for (int r = 0; r < topo_.num_ranks; ++r) {
      result.plan.loads[r] = static_cast<int32_t>(base + (r < extra ? 1 : 0));
    }
    result.has_flows = false;
    return result;
  }

 private:
  Topology topo_;
};

}  // namespace

std::unique_ptr<Policy> make_none_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<NonePolicy>(topo);
}
std::unique_ptr<Policy> make_oracle_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<OraclePolicy>(topo);
}

}  // namespace iser
