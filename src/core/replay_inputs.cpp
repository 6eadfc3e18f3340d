// Inputs of replay beside the served routing: plan histories from another recording, the
// memory/traffic cost models, the default policy set.
#include <algorithm>

#include "iser/error.h"
#include "iser/model.h"
#include "iser/replay.h"
#include "model/names.h"

namespace iser {
namespace {

// W = 3 He I b (gate, up and down projections) at NVFP4 (4 bits + one FP8 scale per 16
// elements), the routed experts' format in both models' serving checkpoints.
double nvfp4_expert_bytes(int64_t hidden, int64_t intermediate) {
  return 3.0 * static_cast<double>(hidden) * static_cast<double>(intermediate) *
         model::element_bytes(model::Precision::kFp4);
}

const std::vector<ReplayCostModel>& cost_models() {
  static const std::vector<ReplayCostModel> kModels = {
      {"deepseek-v4-flash", 43, nvfp4_expert_bytes(4096, 2048), 2,
       "DeepSeek-V4-Flash config.json: 43 MoE layers (3 hash-routed), hidden 4096, "
       "moe_intermediate 2048; NVFP4 experts"},
      {"deepseek-v4-pro", 61, nvfp4_expert_bytes(7168, 3072), 2,
       "paper §2.2/§5: 61 MoE layers, He 7168, I 3072; NVFP4 experts (35.4 MiB each)"},
  };
  return kModels;
}

// Adds `src` into `dst` (int64, checked against overflow).
void accumulate(std::vector<int64_t>& dst, std::span<const int64_t> src, std::string_view what) {
  for (size_t e = 0; e < dst.size(); ++e) {
    ISER_CHECK(src[e] >= 0 && dst[e] <= INT64_MAX - src[e], "{}: expert count overflows", what);
    dst[e] += src[e];
  }
}

}  // namespace

const ReplayCostModel& find_replay_cost_model(std::string_view name) {
  if (const auto* m = model::match_preset(std::span(cost_models()), name)) return *m;
  throw Error(
      fmt::format("unknown model '{}' (ReplayConfig::cost_model, --model; known: {}, or none)",
                  name, model::preset_names(std::span(cost_models()))));
}

std::vector<std::string> replay_cost_model_names() {
  std::vector<std::string> names;
  for (const auto& m : cost_models()) names.push_back(m.name);
  return names;
}

std::vector<std::string> default_replay_policies() {
  return {"none", "eplb", "eplb-window", "eplb-equal-mem", "halo-q", "iser", "oracle"};
}

bool is_static_policy(std::string_view policy) {
  return policy == "eplb" || policy == "eplb-window" || policy == "eplb-equal-mem" ||
         policy == "eplb-oracle";
}

PlanHistory plan_history_from(const TraceData& data, const TraceOptions& options) {
  const TraceMetadata& m = data.metadata;
  data.validate(m.source);
  PlanHistory h;
  h.metadata = m;
  const auto E = static_cast<size_t>(m.num_experts);
  const auto L = static_cast<size_t>(m.num_layers);
  h.histograms.assign(L, std::vector<int64_t>(E, 0));
  switch (data.kind) {
    case TraceKind::kHistograms: {
      size_t c = 0;
      if (!options.category.empty()) {
        const auto it = std::find(data.categories.begin(), data.categories.end(), options.category);
        ISER_CHECK(it != data.categories.end(), "{}: no histogram category '{}' (have: {})",
                   m.source, options.category, fmt::join(data.categories, ", "));
        c = static_cast<size_t>(it - data.categories.begin());
      }
      for (size_t l = 0; l < L; ++l) {
        accumulate(h.histograms[l], std::span(data.histograms[c]).subspan(l * E, E), m.source);
      }
      break;
    }
    case TraceKind::kTokens:
      for (size_t l = 0; l < L; ++l) {
        const auto n = static_cast<size_t>(m.num_tokens * m.top_k);
        for (size_t i = 0; i < n; ++i) {
          const int32_t e = data.topk_ids[l * n + i];
          if (e >= 0) ++h.histograms[l][static_cast<size_t>(e)];
        }
      }
      break;
    case TraceKind::kIterationCounts: {
      const size_t P = static_cast<size_t>(std::max(data.num_ranks, 1));
      for (int64_t i = 0; i < data.num_iterations; ++i) {
        for (size_t l = 0; l < L; ++l) {
          for (size_t r = 0; r < P; ++r) {
            const size_t base = ((static_cast<size_t>(i) * L + l) * P + r) * E;
            accumulate(h.histograms[l], std::span(data.iteration_counts).subspan(base, E),
                       m.source);
          }
        }
      }
      break;
    }
  }
  return h;
}

PlanHistory read_plan_history(const std::filesystem::path& path, const TraceOptions& options) {
  return plan_history_from(read_trace_data(path, options), options);
}

}  // namespace iser
