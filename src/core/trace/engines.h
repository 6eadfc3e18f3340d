// Pieces shared by the readers of engine dumps (SGLang .pt, vLLM tensors, TensorRT-LLM).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "iser/trace.h"

namespace iser::trace {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // row-major, widened
};

// A per-layer map from physical (or slot) index to logical expert, [L, num_physical]. Every
// logical expert 0..E-1 must have a copy in every layer; E is the number of distinct ids.
struct ExpertMap {
  int num_layers = 0;
  int num_physical = 0;
  int num_experts = 0;
  std::vector<int32_t> logical;  // [L, num_physical]

  int32_t at(int layer, int64_t physical) const {
    return logical[static_cast<size_t>(layer) * static_cast<size_t>(num_physical) +
                   static_cast<size_t>(physical)];
  }
};
// `what` names the map in messages; values are checked to cover 0..E-1 in every layer.
ExpertMap make_expert_map(std::vector<int64_t> values, int64_t num_layers, int64_t num_physical,
                          std::string_view what);

// counts [rows, L, num_physical] -> [rows, L, E] through the map.
std::vector<int64_t> physical_to_logical_counts(const std::vector<int64_t>& physical, int64_t rows,
                                                const ExpertMap& map, std::string_view what);

// Removes the [L, E]-sized rows of `counts` that are all zero (unused buffer rows, idle passes);
// returns how many it removed.
int64_t drop_zero_rows(std::vector<int64_t>& counts, size_t row_size);

// vLLM tensors by name: global_expert_load [L, E], expert_load_pass [L, physical] and
// expert_load_window [W, L, physical] (with physical_to_logical_map [L, physical]), and
// routed_experts [T, L, k]. Any other integer tensor is refused.
TraceData read_vllm_tensors(const std::vector<NamedTensor>& tensors,
                            const std::map<std::string, std::string>& metadata,
                            std::string_view name, const TraceOptions& options);

}  // namespace iser::trace
