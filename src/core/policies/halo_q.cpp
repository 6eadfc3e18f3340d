// The HALO-Q family of policies: the reference (`halo-q`) and its docs/design.md §5 variants
// (`owner-home`, `absorb`, `resident`, `halo-q-owner-in`). They share one planner; a variant is a
// set of HaloQOptions.
#include <optional>
#include <string>
#include <string_view>

#include "iser/error.h"
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

// A family member by name (halo_q_variant); PolicyOptions::min_move applies to the resident ones.
std::unique_ptr<Policy> make_variant(std::string_view name, const Topology& topo,
                                     const PolicyOptions& policy) {
  std::optional<HaloQVariant> variant = halo_q_variant(name);
  ISER_CHECK(variant.has_value(), "policy '{}' is not of the HALO-Q family", name);
  if (variant->resident) variant->options.min_move = policy.min_move;
  return std::make_unique<HaloQPolicy>(std::string(name), topo, variant->options, variant->resident,
                                       variant->iser);
}

}  // namespace

std::optional<HaloQVariant> halo_q_variant(std::string_view policy) {
  HaloQVariant variant;
  if (policy == "halo-q") return variant;
  if (policy == "owner-home") {
    variant.options.owner_home = true;
  } else if (policy == "absorb") {
    variant.options.absorb = true;
  } else if (policy == "halo-q-owner-in") {
    variant.options.owner_in_group = true;
  } else if (policy == "resident") {
    variant.resident = true;
  } else if (policy == "iser") {
    // The recommended default: resident replicas are kept (no bytes moved when the previous
    // invocation left the expert in the same group and helper index); min_move applies.
    variant.resident = true;
    variant.iser = true;
  } else if (policy == "iser-stateless") {
    // iser planned from the counts alone, as the GPU planner plans it (no previous plan kept).
    variant.iser = true;
  } else {
    return std::nullopt;
  }
  return variant;
}

std::unique_ptr<Policy> make_iser_policy(const Topology& topo, const PolicyOptions& policy) {
  return make_variant("iser", topo, policy);
}

std::unique_ptr<Policy> make_iser_stateless_policy(const Topology& topo,
                                                   const PolicyOptions& policy) {
  return make_variant("iser-stateless", topo, policy);
}

std::unique_ptr<Policy> make_halo_q_policy(const Topology& topo, const PolicyOptions& policy) {
  return make_variant("halo-q", topo, policy);
}

std::unique_ptr<Policy> make_owner_home_policy(const Topology& topo, const PolicyOptions& policy) {
  return make_variant("owner-home", topo, policy);
}

std::unique_ptr<Policy> make_absorb_policy(const Topology& topo, const PolicyOptions& policy) {
  return make_variant("absorb", topo, policy);
}

std::unique_ptr<Policy> make_resident_policy(const Topology& topo, const PolicyOptions& policy) {
  return make_variant("resident", topo, policy);
}

std::unique_ptr<Policy> make_halo_q_owner_in_policy(const Topology& topo,
                                                    const PolicyOptions& policy) {
  return make_variant("halo-q-owner-in", topo, policy);
}

}  // namespace iser
