// `iser plan`: one invocation's plan from a count matrix (JSON), as a table or as JSON.
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "iser/error.h"
#include "iser/plan_json.h"
#include "iser/policy.h"
#include "iser/validator.h"

namespace iser::cli {
namespace {

struct PlanArgs {
  std::string counts_path;
  int slots = 4;
  int g_min = kDefaultGMin;
  int lsa_size = 0;  // 0: one team of P
  std::string policy = "halo-q";
  int min_move = 0;
  bool json = false;
  bool validate = false;
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  ISER_CHECK(in.good(), "{}: cannot open file", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: invalid JSON ({})", path, e.what()));
  }
}

std::string join(const std::vector<int32_t>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? " " : "") + std::to_string(xs[i]);
  return s;
}

void print_table(const Topology& topo, const Plan& plan, std::string_view policy) {
  fmt::print("policy {}  P = {}  E = {}  S = {}  g_min = {}  T = {}\n", policy, topo.num_ranks,
             topo.num_experts, topo.num_slots, topo.g_min, plan.target);
  if (topo.num_teams() > 1) {
    fmt::print("LSA teams: {} x {} ranks\n", topo.num_teams(), topo.team_size());
  }
  fmt::print("loads: {}\n", join(plan.loads));
  fmt::print("{} broadcasts\n", plan.broadcasts.size());
  if (plan.broadcasts.empty()) return;
  fmt::print("{:>4} {:>6} {:>5} {:>5} {:>9} {:>6} {:>12}  {}\n", "#", "expert", "owner", "level",
             "group", "helper", "mode", "quota");
  for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
    const Broadcast& b = plan.broadcasts[i];
    std::string mode(to_string(b.mode));
    if (b.resident) mode += "*";
    fmt::print("{:>4} {:>6} {:>5} {:>5} {:>9} {:>6} {:>12}  {}\n", i, b.expert, b.owner, b.level,
               fmt::format("[{},{})", b.group_begin, b.group_begin + b.group_size), b.helper, mode,
               join(b.quota));
  }
}

void run_plan(const PlanArgs& args) {
  const CountMatrix counts = counts_from_json(read_json(args.counts_path), args.counts_path);
  const Topology topo = Topology::make(counts.num_ranks(), counts.num_experts(), args.slots,
                                       args.g_min, args.lsa_size);
  PolicyOptions options;
  options.min_move = args.min_move;
  const auto policy = make_policy(args.policy, topo, options);
  const PolicyResult result = policy->plan(counts);
  if (args.validate) check_plan(topo, counts, result.plan, policy->validation());
  if (args.json) {
    auto j = plan_to_json(result.plan);
    j["policy"] = args.policy;
    if (args.lsa_size > 0) j["lsa_size"] = args.lsa_size;
    if (args.validate) j["valid"] = true;
    fmt::print("{}\n", j.dump(2));
  } else {
    print_table(topo, result.plan, args.policy);
    if (args.validate) fmt::print("plan is valid\n");
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "plan one invocation from a count matrix");
  cmd->add_option("--counts", args->counts_path,
                  "JSON {\"num_ranks\": P, \"num_experts\": E, \"counts\": [[E ints] x P]}")
      ->required();
  cmd->add_option("--slots", args->slots, "helper slots per rank (S)")->capture_default_str();
  cmd->add_option("--g-min", args->g_min, "smallest aligned group size")->capture_default_str();
  cmd->add_option("--lsa-size", args->lsa_size,
                  "LSA team size: groups stay inside teams of this many consecutive ranks "
                  "(must divide P; default: one team)")
      ->check(CLI::Range(1, kMaxRanks));
  cmd->add_option("--policy", args->policy, "planning policy (see `iser plan --help`)")
      ->capture_default_str();
  cmd->add_option("--min-move", args->min_move,
                  "resident/iser: skip replications moving fewer routes")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print the plan as JSON");
  cmd->add_flag("--validate", args->validate, "check every plan invariant (non-zero exit if not)");
  cmd->callback([args] { run_plan(*args); });
}

}  // namespace iser::cli
