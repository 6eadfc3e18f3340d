// `iser counts` (one invocation's count matrix from a trace or synthetic generator, as the JSON
// `iser plan` reads), `iser bound` (how far from optimal policies are on one count matrix) and
// the gap table of `iser replay --bound`.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "bound_report.h"
#include "commands.h"
#include "iser/bound.h"
#include "iser/error.h"
#include "iser/metrics.h"
#include "iser/plan_json.h"
#include "iser/policy.h"
#include "iser/rewrite.h"
#include "iser/validator.h"

namespace iser::cli {
namespace {

struct CountsArgs {
  std::string trace;
  SyntheticOptions synthetic;
  int num_ranks = 64;
  int tokens_per_rank = 8192;
  int layer = 0;
  int64_t iteration = 0;
  std::string out;
};

void run_counts(const CountsArgs& args) {
  std::unique_ptr<RoutingSource> source;
  if (!args.trace.empty()) {
    TraceOptions options;
    options.seed = args.synthetic.seed;
    source = open_trace(args.trace, options);
  } else {
    source = make_synthetic(args.synthetic);
  }
  const CountMatrix counts =
      source->counts(args.layer, args.iteration, args.num_ranks, args.tokens_per_rank);
  const std::string text = counts_to_json(counts).dump() + "\n";
  if (args.out.empty()) {
    fmt::print("{}", text);
    return;
  }
  std::ofstream out(args.out);
  out << text;
  ISER_CHECK(out.good(), "cannot write '{}'", args.out);
}

struct BoundArgs {
  std::string counts_path;
  int slots = 2;
  int g_min = kDefaultGMin;
  int lsa_size = 0;  // 0: one team of P
  double time_limit = 10.0;
  std::string policies = "iser,halo-q";
  std::string plan_out;  // the block search's plan as JSON, when it found one
};

CountMatrix read_counts(const std::string& path) {
  std::ifstream in(path);
  ISER_CHECK(in.good(), "{}: cannot open file", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return counts_from_json(nlohmann::json::parse(text.str()), path);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: invalid JSON ({})", path, e.what()));
  }
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

void run_bound(const BoundArgs& args) {
  const CountMatrix counts = read_counts(args.counts_path);
  const Topology topo = Topology::make(counts.num_ranks(), counts.num_experts(), args.slots,
                                       args.g_min, args.lsa_size);
  BoundOptions options;
  options.time_limit_s = args.time_limit;
  const PlanBound bound = plan_bound(topo, counts, options);
  fmt::print("P = {}  E = {}  S = {}  mean load = {:.1f}\n", topo.num_ranks, topo.num_experts,
             topo.num_slots, bound.mean_load);
  fmt::print("bound ({}, {}): max load >= {}  R >= {:.4f}",
             bound.optimal() ? "proven optimal" : "lower bound only", to_string(bound.method),
             bound.lower, bound.r_lower());
  if (bound.upper)
    fmt::print("  (best plan known: {}, R {:.4f})", *bound.upper, *bound.upper / bound.mean_load);
  fmt::print("\ncombinatorial bound (slot budget included): {}  R >= {:.4f}\n", bound.combinatorial,
             bound.combinatorial / bound.mean_load);
  if (bound.blocks > 0) {
    fmt::print("block program (finest groups aggregated): {}  R >= {:.4f}\n", bound.blocks,
               bound.blocks / bound.mean_load);
  }
  if (!bound_solver_available()) {
    fmt::print("(built without CBC: install coinor-libcbc-dev and rebuild for the exact bound)\n");
  }
  fmt::print("{:<14} {:>9} {:>8} {:>8} {:>9} {:>7}\n", "policy", "max load", "R", "gap", "payloads",
             "copies");
  for (const std::string& name : split_commas(args.policies)) {
    const auto policy = make_policy(name, topo);
    const PolicyResult result = policy->plan(counts);
    check_plan(topo, counts, result.plan, policy->validation());
    const InvocationMetrics m = measure_invocation(topo, counts, result);
    int64_t max_load = 0;
    for (const int32_t l : result.plan.loads) max_load = std::max<int64_t>(max_load, l);
    fmt::print("{:<14} {:>9} {:>8.4f} {:>8.4f} {:>9} {:>7}\n", name, max_load, m.r_after,
               m.r_after - bound.r_lower(), m.max_owner_payloads, m.remote_copies);
  }
  if (!bound.plan) return;
  // The block search's plan (a valid iser plan below iser's), beside the policies.
  PolicyResult found;
  found.plan = *bound.plan;
  check_plan(topo, counts, found.plan, make_policy("iser", topo)->validation());
  found.flows = rewrite_flows(topo, counts, found.plan);
  const InvocationMetrics m = measure_invocation(topo, counts, found);
  const int32_t max_load = *std::max_element(found.plan.loads.begin(), found.plan.loads.end());
  fmt::print("{:<14} {:>9} {:>8.4f} {:>8.4f} {:>9} {:>7}\n", "(block search)", max_load, m.r_after,
             m.r_after - bound.r_lower(), m.max_owner_payloads, m.remote_copies);
  if (args.plan_out.empty()) return;
  std::ofstream out(args.plan_out);
  out << plan_to_json(found.plan).dump() << "\n";
  ISER_CHECK(out.good(), "cannot write '{}'", args.plan_out);
}

}  // namespace

void add_counts_command(CLI::App& app) {
  auto args = std::make_shared<CountsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "counts",
      "one invocation's count matrix (the JSON `iser plan --counts` reads) from a trace "
      "or a synthetic generator");
  cmd->add_option("--trace", args->trace, "routing file or directory")
      ->excludes(cmd->add_option("--synthetic", args->synthetic.kind,
                                 "power-law, mixed or a skew family (zipf-A, hot-ranks, "
                                 "hot-spread, rank-skew, drift, layer-correlated)"));
  cmd->add_option("--ep", args->num_ranks, "ranks P")->check(CLI::Range(1, kMaxRanks));
  cmd->add_option("--tokens-per-rank", args->tokens_per_rank, "tokens per rank (tau)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--layer", args->layer, "layer")->check(CLI::NonNegativeNumber);
  cmd->add_option("--iteration", args->iteration, "iteration")->check(CLI::NonNegativeNumber);
  cmd->add_option("--num-experts", args->synthetic.num_experts, "synthetic: experts E")
      ->check(CLI::Range(1, kMaxExperts));
  cmd->add_option("--top-k", args->synthetic.top_k, "synthetic: top-k")->check(CLI::Range(1, 64));
  cmd->add_option("--num-layers", args->synthetic.num_layers, "synthetic: layers")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--alpha", args->synthetic.alpha, "power-law: Zipf exponent")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->synthetic.seed, "seed");
  cmd->add_option("-o,--output", args->out, "write here instead of standard output");
  cmd->callback([args] { run_counts(*args); });
}

void add_bound_command(CLI::App& app) {
  auto args = std::make_shared<BoundArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bound",
      "the best max load any plan can reach under iser's constraints for a count "
      "matrix (integer program, CBC), and each policy's gap to it");
  cmd->add_option("--counts", args->counts_path, "count matrix JSON (as `iser plan` reads)")
      ->required();
  cmd->add_option("--slots", args->slots, "helper slots per rank (S)")
      ->check(CLI::Range(0, kMaxSlots))
      ->capture_default_str();
  cmd->add_option("--g-min", args->g_min, "smallest aligned group size")->capture_default_str();
  cmd->add_option("--lsa-size", args->lsa_size,
                  "LSA team size: groups stay inside teams of this many consecutive ranks")
      ->check(CLI::Range(1, kMaxRanks));
  cmd->add_option("--time-limit", args->time_limit,
                  "solver seconds; past it the bound is the solver's proven dual bound")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--policies", args->policies, "policies to compare")->capture_default_str();
  cmd->add_option("--plan-out", args->plan_out,
                  "write the block search's plan as JSON (as `iser plan --json`) when it found one "
                  "below iser's");
  cmd->callback([args] { run_bound(*args); });
}

void print_bound_gaps(const RoutingSource& source, const ReplayResult& result, double time_limit_s,
                      std::FILE* out) {
  const ReplayConfig& config = result.config;
  BoundOptions options;
  options.time_limit_s = time_limit_s;
  fmt::print(out, "\nGap to the bound (iser's constraints, S = {}; mean over invocations)\n",
             config.num_slots);
  for (size_t i = 0; i < config.ep_degrees.size(); ++i) {
    const int P = config.ep_degrees[i];
    const Topology topo = Topology::make(P, result.metadata.num_experts, config.num_slots,
                                         config.g_min, config.lsa_size);
    double sum_r = 0, sum_best_r = 0;
    int64_t n = 0, optimal = 0, solver_bound = 0, blocks = 0, proven = 0;
    for (const int layer : result.layers) {
      for (int64_t it = 0; it < result.iterations_per_ep[i]; ++it) {
        const PlanBound b =
            plan_bound(topo, source.counts(layer, it, P, config.tokens_per_rank), options);
        sum_r += b.r_lower();
        sum_best_r += b.upper ? static_cast<double>(*b.upper) / b.mean_load : 1.0;
        optimal += b.method == BoundMethod::kIpOptimal ? 1 : 0;
        solver_bound += b.method == BoundMethod::kIpBound ? 1 : 0;
        blocks += b.method == BoundMethod::kBlocks ? 1 : 0;
        proven += b.optimal() ? 1 : 0;
        ++n;
      }
    }
    const double bound_r = n > 0 ? sum_r / static_cast<double>(n) : 1.0;
    const double best_r = n > 0 ? sum_best_r / static_cast<double>(n) : 1.0;
    fmt::print(out,
               "EP{}: bound R {:.4f} ({} of {} invocations solved to optimality, {} with the "
               "solver's dual bound, {} by the block program, the rest combinatorial{}; proven "
               "optimal: {} of {})\n",
               P, bound_r, optimal, n, solver_bound, blocks,
               bound_solver_available() ? "" : "; built without CBC", proven, n);
    fmt::print(out, "  {:<16} R {:.4f}  (iser's, the block search's or the solver's)\n",
               "best plan known", best_r);
    for (const PolicySummary& s : result.results) {
      if (s.ep != P) continue;
      fmt::print(out, "  {:<16} R {:.4f}  gap {:+.4f}\n", s.policy, s.mean_r, s.mean_r - bound_r);
    }
  }
}

}  // namespace iser::cli
