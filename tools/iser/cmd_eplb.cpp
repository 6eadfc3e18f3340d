// `iser eplb`: DeepSeek's EPLB on a load file, printing the placement as JSON.
//   input  {"weight": [[...E] x L]}   (non-negative loads per layer and logical expert)
//   output {"phy2log": [[...R] x L], "log2phy": [[[...X] x E] x L], "logcnt": [[...E] x L]}
#include <cmath>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "iser/eplb.h"
#include "iser/error.h"

namespace iser::cli {
namespace {

struct EplbArgs {
  std::string weight_path;
  EplbConfig config;
};

struct WeightMatrix {
  int num_layers = 0;
  int num_experts = 0;
  std::vector<double> values;  // [L, E]
};

WeightMatrix read_weight(const std::string& path) {
  std::ifstream in(path);
  ISER_CHECK(in.good(), "{}: cannot open the weight file", path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  ISER_CHECK(doc.is_object() && doc.contains("weight"),
             "{}: expected an object with a field \"weight\" ([[...experts] x layers])", path);
  const auto& weight = doc["weight"];
  ISER_CHECK(weight.is_array() && !weight.empty(),
             "{}: field \"weight\" must be a non-empty array of layers", path);
  WeightMatrix m;
  m.num_layers = static_cast<int>(weight.size());
  for (size_t l = 0; l < weight.size(); ++l) {
    const auto& layer = weight[l];
    ISER_CHECK(layer.is_array() && !layer.empty(),
               "{}: weight[{}] must be a non-empty array of expert loads", path, l);
    if (l == 0) m.num_experts = static_cast<int>(layer.size());
    ISER_CHECK(static_cast<int>(layer.size()) == m.num_experts,
               "{}: weight[{}] has {} experts, but weight[0] has {}", path, l, layer.size(),
               m.num_experts);
    for (size_t e = 0; e < layer.size(); ++e) {
      const auto& v = layer[e];
      ISER_CHECK(v.is_number(), "{}: weight[{}][{}] = {} is not a number", path, l, e, v.dump());
      const double w = v.get<double>();
      ISER_CHECK(std::isfinite(w), "{}: weight[{}][{}] = {} is not finite", path, l, e, v.dump());
      ISER_CHECK(w >= 0.0, "{}: weight[{}][{}] = {} is negative", path, l, e, v.dump());
      m.values.push_back(w);
    }
  }
  return m;
}

// Rows of a [rows, width] array as JSON lists, ", "-separated like Python's json.dumps.
std::string json_rows(const std::vector<int32_t>& v, size_t rows, size_t width) {
  std::string out = "[";
  for (size_t r = 0; r < rows; ++r) {
    if (r > 0) out += ", ";
    const auto first = v.begin() + static_cast<ptrdiff_t>(r * width);
    out += fmt::format("[{}]", fmt::join(first, first + static_cast<ptrdiff_t>(width), ", "));
  }
  return out + "]";
}

void run_eplb(const EplbArgs& args) {
  const WeightMatrix w = read_weight(args.weight_path);
  const EplbPlacement p = eplb_rebalance(w.values, w.num_layers, w.num_experts, args.config);
  const size_t L = static_cast<size_t>(p.num_layers);
  const size_t E = static_cast<size_t>(p.num_experts);
  std::string log2phy = "[";
  for (size_t l = 0; l < L; ++l) {
    if (l > 0) log2phy += ", ";
    const std::vector<int32_t> layer(
        p.log2phy.begin() + static_cast<ptrdiff_t>(l * E * p.max_replica_count),
        p.log2phy.begin() + static_cast<ptrdiff_t>((l + 1) * E * p.max_replica_count));
    log2phy += json_rows(layer, E, static_cast<size_t>(p.max_replica_count));
  }
  log2phy += "]";
  fmt::print("{{\"phy2log\": {}, \"log2phy\": {}, \"logcnt\": {}}}\n",
             json_rows(p.phy2log, L, static_cast<size_t>(p.num_replicas)), log2phy,
             json_rows(p.logcnt, L, E));
}

}  // namespace

void add_eplb_command(CLI::App& app) {
  auto args = std::make_shared<EplbArgs>();
  CLI::App* sub = app.add_subcommand(
      "eplb", "DeepSeek's Expert Parallelism Load Balancer: replicas and their GPU placement");
  sub->add_option("--weight", args->weight_path,
                  "JSON file {\"weight\": [[load per expert] per layer]}")
      ->required();
  sub->add_option("--replicas", args->config.num_replicas,
                  "physical experts per layer (>= experts, a multiple of --gpus)")
      ->required();
  sub->add_option("--groups", args->config.num_groups, "expert groups")->default_val(1);
  sub->add_option("--nodes", args->config.num_nodes,
                  "server nodes (hierarchical policy when nodes divide groups, else global)")
      ->default_val(1);
  sub->add_option("--gpus", args->config.num_gpus, "GPUs (a multiple of --nodes)")->required();
  sub->callback([args] { run_eplb(*args); });
}

}  // namespace iser::cli
