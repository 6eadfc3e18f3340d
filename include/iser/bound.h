// How far from optimal: the best max load any plan can reach for one count matrix under the
// `iser` policy's constraints (tools: `iser bound`, `iser replay --bound`; docs/evaluation.md).
//
// The constraints, exactly those the validator checks for iser plans: broadcasts over aligned
// groups; every rank a member of at most S groups (the owner too when it is a member); at most S
// broadcasts per owner (an expert may be broadcast more than once); an expert's routes computed
// only by its owner or members of its groups, in whole routes; every route computed once.
//
// Bounds on the optimal max load M* (src/core/planner/bound.cpp states the proofs):
//  - combinatorial (always): M* >= T; M* >= L[o] minus the S largest hist among o's home experts
//    (an owner sheds at most one expert's routes per broadcast); and the slot budget: for a
//    target M every owner above it needs broadcasts whose groups can take its excess, each
//    costing one helper slot per member, and a team has S slots per rank in all;
//  - the block program (CBC): the integer program aggregated over the finest aligned groups,
//    where only helper slots, broadcasts and the routes that cross blocks count; it closes the
//    cases where nearly every slot is needed (src/core/planner/bound_blocks.cpp);
//  - the integer program over those constraints (CBC, when iser was built with it), started from
//    iser's plan: solved to optimality, or, at the time limit, its proven dual bound.
// `upper` is the best plan known (iser's or the solver's); lower == upper proves it optimal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

namespace iser {

struct BoundOptions {
  double time_limit_s = 10.0;  // per count matrix (half for the block program, the rest for the
                               // integer program); the solver stops with a proven bound
  bool use_solver = true;      // false: the combinatorial bound only
};

enum class BoundMethod {
  kCombinatorial,  // the combinatorial bounds (no solver run, or they already meet a plan)
  kBlocks,         // the block program: no plan below `lower` (lower == upper: optimal)
  kIpOptimal,      // the integer program solved to optimality: lower == upper
  kIpBound,        // the solver stopped at its time limit: lower is its proven dual bound
};
std::string_view to_string(BoundMethod method);

struct PlanBound {
  BoundMethod method = BoundMethod::kCombinatorial;
  int64_t lower = 0;             // proven: no valid plan has a max load below this
  std::optional<int64_t> upper;  // max load of the best plan known (iser's, the block
                                 // search's or the solver's)
  std::optional<Plan> plan;      // the block search's plan, when it beat iser's (a valid iser
                                 // plan: owner payloads <= S, experts possibly sent twice)
  int64_t combinatorial = 0;     // the combinatorial bound alone
  int64_t blocks = 0;            // the block program's bound (0: not run)
  double mean_load = 0.0;        // total routes / P
  double r_lower() const { return mean_load > 0 ? lower / mean_load : 1.0; }
  // No plan beats the best one known: lower == upper.
  bool optimal() const { return upper && *upper == lower; }
};

// True when this build can solve the integer program (CBC found at build time).
bool bound_solver_available();

// Throws iser::Error when counts do not match the topology.
PlanBound plan_bound(const Topology& topo, const CountMatrix& counts,
                     const BoundOptions& options = {});

}  // namespace iser
