// Balance of the planning policies on Zipf workloads tuned to a rank-level imbalance (the EP64
// heavy-skew study of docs/evaluation.md): EP64, E = 256 (H = 4), top-8, 8,192 tokens/rank by
// default; mean R after planning, the busiest owner's payloads and remote copies per invocation.
// Not a timing benchmark.
//
//   build/bench/eval_policies [--ranks 64] [--experts 256] [--top-k 8] [--tokens 8192]
//                             [--layers 4] [--iterations 2] [--policies halo-q,absorb,iser]
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/planner/synthetic_counts.h"
#include "iser/metrics.h"
#include "iser/policy.h"
#include "iser/validator.h"

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 64;
  int experts = 256;
  int top_k = 8;
  int tokens = 8192;
  int layers = 4;
  int iterations = 2;
  std::string policies = "none,halo-q,absorb,iser";
  std::string imbalances = "1.5,2.0,3.0";
  std::string slots = "2,4";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--ranks")
      ranks = std::atoi(value.c_str());
    else if (flag == "--experts")
      experts = std::atoi(value.c_str());
    else if (flag == "--top-k")
      top_k = std::atoi(value.c_str());
    else if (flag == "--tokens")
      tokens = std::atoi(value.c_str());
    else if (flag == "--layers")
      layers = std::atoi(value.c_str());
    else if (flag == "--iterations")
      iterations = std::atoi(value.c_str());
    else if (flag == "--policies")
      policies = value;
    else if (flag == "--imbalances")
      imbalances = value;
    else if (flag == "--slots")
      slots = value;
    else {
      fmt::print(stderr, "unknown flag {}\n", flag);
      return 2;
    }
  }
  fmt::print("EP{} E={} top-{} tau={} layers={} iterations={}\n", ranks, experts, top_k, tokens,
             layers, iterations);
  fmt::print("{:>6} {:>6} {:>2} {:>16} {:>9} {:>9} {:>8} {:>8} {:>7}\n", "target", "alpha", "S",
             "policy", "R before", "R after", "max R", "copies", "payload");
  for (const auto& imb : split(imbalances)) {
    iser::testing::ZipfOptions o;
    o.num_ranks = ranks;
    o.num_experts = experts;
    o.top_k = top_k;
    o.tokens_per_rank = tokens;
    std::vector<iser::CountMatrix> sets;
    std::vector<double> alphas;
    for (int layer = 0; layer < layers; ++layer) {
      o.seed = 1000 + layer;
      o.alpha = iser::testing::tune_zipf_alpha(o, std::atof(imb.c_str()));
      alphas.push_back(o.alpha);
      for (int it = 0; it < iterations; ++it) {
        o.iteration = it;
        sets.push_back(iser::testing::zipf_counts(o));
      }
    }
    for (const auto& s_text : split(slots)) {
      const int S = std::atoi(s_text.c_str());
      const auto topo = iser::Topology::make(ranks, experts, S);
      for (const auto& name : split(policies)) {
        double r_before = 0;
        double r_after = 0;
        double r_max = 0;
        double copies = 0;
        int payload = 0;
        std::unique_ptr<iser::Policy> policy;
        for (size_t k = 0; k < sets.size(); ++k) {
          // One policy instance per layer (resident state is per layer).
          if (k % iterations == 0) policy = iser::make_policy(name, topo);
          const auto& counts = sets[k];
          const auto result = policy->plan(counts);
          iser::check_plan(topo, counts, result.plan, policy->validation());
          const auto m = iser::measure_invocation(topo, counts, result);
          r_before += m.r_before;
          r_after += m.r_after;
          r_max = std::max(r_max, m.r_after);
          copies += m.remote_copies;
          payload = std::max(payload, m.max_owner_payloads);
        }
        const double n = static_cast<double>(sets.size());
        fmt::print("{:>6} {:>6.3f} {:>2} {:>16} {:>9.3f} {:>9.4f} {:>8.4f} {:>8.1f} {:>7}\n", imb,
                   alphas[0], S, name, r_before / n, r_after / n, r_max, copies / n, payload);
      }
    }
  }
  return 0;
}
