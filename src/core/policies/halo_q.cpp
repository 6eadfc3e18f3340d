// The HALO-Q family of policies: the reference (`halo-q`) and its docs/design.md §5 variants
// (`owner-home`, `absorb`, `resident`, `halo-q-owner-in`). They share one planner; a variant is a
// set of HaloQOptions.
#include <string>

#include "iser/planner.h"
#include "iser/rewrite.h"
#include "policies/factories.h"

namespace iser {
namespace {

class HaloQPolicy final : public Policy {
 public:
  HaloQPolicy(std::string name, const Topology& topo, const HaloQOptions& options, bool resident,
              bool iser = false)
      : name_(std::move(name)), topo_(topo), options_(options), resident_(resident), iser_(iser) {}

  std::string_view name() const override { return name_; }

  ValidationOptions validation() const override {
    ValidationOptions v;
    v.require_aligned_groups = true;
    if (iser_) {
      // iser may export a very hot expert twice (disjoint groups), at most S per owner.
      v.max_exports_per_owner = topo_.num_slots > 0 ? topo_.num_slots : -1;
      v.unique_experts = false;
    } else {
      v.max_exports_per_owner = -1;  // min(S, H)
      v.unique_experts = true;
    }
    return v;
  }

  PolicyResult plan(const CountMatrix& counts) override {
    PolicyResult result;
    HaloQOptions options = options_;
    // resident: the previous invocation's plan of this layer is the only state, and it is
    // passed explicitly; the first invocation has none.
    if (resident_ && has_previous_) options.previous = &previous_;
    if (iser_) {
      plan_iser(topo_, counts, options, ws_, result.plan);
    } else {
      plan_halo_q(topo_, counts, options, ws_, result.plan);
    }
    result.flows = rewrite_flows(topo_, counts, result.plan);
    for (const Broadcast& b : result.plan.broadcasts) result.resident_broadcasts += b.resident;
    if (resident_) {
      previous_ = result.plan;
      has_previous_ = true;
    }
    return result;
  }

 private:
  std::string name_;
  Topology topo_;
  HaloQOptions options_;
  bool resident_ = false;
  bool iser_ = false;
  PlannerWorkspace ws_;
  Plan previous_;
  bool has_previous_ = false;
};

}  // namespace

// iser: the recommended default. Resident replicas are kept (no bytes moved when the
// previous invocation left the expert in the same group and helper index); min_move applies.
std::unique_ptr<Policy> make_iser_policy(const Topology& topo, const PolicyOptions& policy) {
  HaloQOptions options;
  options.min_move = policy.min_move;
  return std::make_unique<HaloQPolicy>("iser", topo, options, /*resident=*/true, /*iser=*/true);
}

std::unique_ptr<Policy> make_halo_q_policy(const Topology& topo, const PolicyOptions&) {
  return std::make_unique<HaloQPolicy>("halo-q", topo, HaloQOptions{}, false);
}

std::unique_ptr<Policy> make_owner_home_policy(const Topology& topo, const PolicyOptions&) {
  HaloQOptions options;
  options.owner_home = true;
  return std::make_unique<HaloQPolicy>("owner-home", topo, options, false);
}

std::unique_ptr<Policy> make_absorb_policy(const Topology& topo, const PolicyOptions&) {
  HaloQOptions options;
  options.absorb = true;
  return std::make_unique<HaloQPolicy>("absorb", topo, options, false);
}

std::unique_ptr<Policy> make_resident_policy(const Topology& topo, const PolicyOptions& policy) {
  HaloQOptions options;
  options.min_move = policy.min_move;
  return std::make_unique<HaloQPolicy>("resident", topo, options, true);
}

std::unique_ptr<Policy> make_halo_q_owner_in_policy(const Topology& topo, const PolicyOptions&) {
  HaloQOptions options;
  options.owner_in_group = true;
  return std::make_unique<HaloQPolicy>("halo-q-owner-in", topo, options, false);
}

}  // namespace iser
