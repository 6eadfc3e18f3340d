// Plans one invocation with the installed iser::core and checks the plan; finds the installed
// bundled data.
#include <cstdio>
#include <filesystem>

#include "iser/policy.h"
#include "iser/trace.h"
#include "iser/validator.h"

int main() {
  const iser::Topology topo = iser::Topology::make(8, 64, 2);
  iser::CountMatrix counts(8, 64);
  for (int s = 0; s < 8; ++s) {
    for (int e = 0; e < 64; ++e) counts.at(s, e) = e < 2 ? 400 : 10 + (s + e) % 7;
  }
  const auto policy = iser::make_policy("iser", topo);
  const iser::Plan plan = policy->plan(counts).plan;
  iser::check_plan(topo, counts, plan, policy->validation());
  if (plan.broadcasts.empty()) {
    std::fprintf(stderr, "consumer: expected the two hot experts to be replicated\n");
    return 1;
  }
  const auto data = std::filesystem::path(INSTALLED_DATA_DIR) / "dsv41-flash-coding.safetensors";
  if (!std::filesystem::exists(data)) {
    std::fprintf(stderr, "consumer: %s missing from the installed tree\n", data.c_str());
    return 1;
  }
  const auto trace = iser::open_trace(data);
  std::printf("consumer: %zu broadcasts, T = %d; installed data: %d layers x %d experts\n",
              plan.broadcasts.size(), plan.target, trace->metadata().num_layers,
              trace->metadata().num_experts);
  return 0;
}
