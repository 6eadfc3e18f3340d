#include "bench/moe/bench_routing.h"

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "iser/error.h"

namespace iser::moe {

std::vector<int> parse_layers(const std::string& spec, int num_layers) {
  std::vector<int> layers;
  if (spec.find(':') != std::string::npos) {
    int first = 0, last = 0, step = 1;
    char tail = 0;
    ISER_CHECK(std::sscanf(spec.c_str(), "%d:%d:%d%c", &first, &last, &step, &tail) == 3 &&
                   step > 0 && first <= last,
               "--layers '{}': expected first:last:step with first <= last and step > 0", spec);
    for (int l = first; l <= last; l += step) layers.push_back(l);
  } else {
    std::stringstream fields(spec);
    std::string field;
    while (std::getline(fields, field, ',')) {
      int layer = 0;
      const char* end = field.data() + field.size();
      const auto [ptr, ec] = std::from_chars(field.data(), end, layer);
      ISER_CHECK(!field.empty() && ec == std::errc() && ptr == end,
                 "--layers '{}': '{}' is not a layer number", spec, field);
      layers.push_back(layer);
    }
  }
  ISER_CHECK(!layers.empty(), "--layers '{}': no layer", spec);
  for (int l : layers) {
    ISER_CHECK(l >= 0 && l < num_layers, "--layers: layer {} outside [0, {})", l, num_layers);
  }
  return layers;
}

std::unique_ptr<RoutingSource> open_bench_trace(const std::string& path, int num_experts,
                                                int top_k) {
  auto trace = open_trace(path.empty() ? bundled_default_trace() : std::filesystem::path(path));
  const TraceMetadata& meta = trace->metadata();
  ISER_CHECK(meta.num_experts == num_experts && meta.top_k == top_k,
             "--trace {}: E = {}, top-k = {}; the benchmark runs E = {}, top-k = {}", meta.source,
             meta.num_experts, meta.top_k, num_experts, top_k);
  return trace;
}

}  // namespace iser::moe
