// Layer-time projections t = intercept + slope * R (docs/models.md, "Projection").
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "iser/error.h"
#include "iser/model.h"
#include "model/names.h"

namespace iser::model {
namespace {

const LayerTimeFit kFits[] = {
    {"gb200-ep8", 513.0, 1051.0, 8, 8192,
     "paper §2.2: MegaMoE without replicas on GB200, EP8, 8,192 tokens/rank, trace-derived "
     "routing: t = 513 + 1051 R us"},
};

}  // namespace

void LayerTimeFit::validate() const {
  ISER_CHECK(!name.empty(), "layer-time fit: field 'name' is empty");
  ISER_CHECK(std::isfinite(intercept_us), "layer-time fit '{}': invalid intercept_us = {}", name,
             intercept_us);
  ISER_CHECK(std::isfinite(slope_us) && slope_us >= 0,
             "layer-time fit '{}': invalid slope_us = {}: need a finite value >= 0", name,
             slope_us);
  ISER_CHECK(ep >= 0, "layer-time fit '{}': invalid ep = {}: need >= 0", name, ep);
  ISER_CHECK(tokens_per_rank >= 0, "layer-time fit '{}': invalid tokens_per_rank = {}", name,
             tokens_per_rank);
  // A time must stay positive over the whole range R in [1, P] that it may be asked about.
  ISER_CHECK(intercept_us + slope_us > 0, "layer-time fit '{}': t(R = 1) = {} us is not positive",
             name, intercept_us + slope_us);
}

double LayerTimeFit::project_us(double r) const {
  ISER_CHECK(std::isfinite(r) && r >= 1.0,
             "invalid imbalance ratio R = {}: need R >= 1 (R = max load / mean load)", r);
  ISER_CHECK(ep == 0 || r <= ep, "invalid imbalance ratio R = {}: fit '{}' is for EP{}, so R <= {}",
             r, name, ep, ep);
  return intercept_us + slope_us * r;
}

std::span<const LayerTimeFit> layer_time_presets() {
  return kFits;
}

LayerTimeFit parse_layer_time_fit(std::string_view json_text, std::string_view origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  ISER_CHECK(doc.is_object(), "{}: a layer-time fit must be a JSON object", origin);
  const auto number = [&](const char* key, bool required) -> double {
    const auto it = doc.find(key);
    if (it == doc.end()) {
      ISER_CHECK(!required, "{}: missing field '{}'", origin, key);
      return 0;
    }
    ISER_CHECK(it->is_number(), "{}: field '{}' must be a number, got {}", origin, key, it->dump());
    return it->get<double>();
  };
  const auto integer = [&](const char* key) -> int64_t {
    const double value = number(key, false);
    ISER_CHECK(value >= 0 && value <= 1e15 && value == std::floor(value),
               "{}: field '{}' must be a non-negative integer, got {}", origin, key, value);
    return static_cast<int64_t>(value);
  };
  LayerTimeFit fit;
  const auto name = doc.find("name");
  ISER_CHECK(name != doc.end() && name->is_string() && !name->get<std::string>().empty(),
             "{}: field 'name' must be a non-empty string", origin);
  fit.name = name->get<std::string>();
  fit.intercept_us = number("intercept_us", true);
  fit.slope_us = number("slope_us", true);
  const int64_t ep = integer("ep");
  ISER_CHECK(ep <= (1 << 16), "{}: field 'ep' = {} is too large", origin, ep);
  fit.ep = static_cast<int>(ep);
  fit.tokens_per_rank = integer("tokens_per_rank");
  if (const auto source = doc.find("source"); source != doc.end()) {
    ISER_CHECK(source->is_string(), "{}: field 'source' must be a string", origin);
    fit.source = source->get<std::string>();
  } else {
    fit.source = std::string(origin);
  }
  try {
    fit.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  return fit;
}

LayerTimeFit load_layer_time_fit(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  ISER_CHECK(in.good(), "{}: cannot open layer-time fit file", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_layer_time_fit(text.str(), path.string());
}

std::string layer_time_fit_json(const LayerTimeFit& fit) {
  const nlohmann::json doc = {
      {"name", fit.name}, {"intercept_us", fit.intercept_us},       {"slope_us", fit.slope_us},
      {"ep", fit.ep},     {"tokens_per_rank", fit.tokens_per_rank}, {"source", fit.source}};
  return doc.dump(2);
}

LayerTimeFit find_layer_time_fit(std::string_view name_or_path) {
  if (const LayerTimeFit* fit = match_preset(layer_time_presets(), name_or_path)) return *fit;
  const std::filesystem::path path(name_or_path);
  if (std::filesystem::exists(path)) return load_layer_time_fit(path);
  throw Error(fmt::format("unknown layer-time fit '{}': not a preset ({}) nor a readable file",
                          name_or_path, preset_names(layer_time_presets())));
}

LayerTimeFit fit_layer_time(std::span<const double> r, std::span<const double> t_us,
                            std::string name) {
  ISER_CHECK(r.size() == t_us.size(), "layer-time fit '{}': {} R values but {} times", name,
             r.size(), t_us.size());
  ISER_CHECK(r.size() >= 2, "layer-time fit '{}': need at least two (R, t) points, got {}", name,
             r.size());
  double mean_r = 0;
  double mean_t = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    ISER_CHECK(std::isfinite(r[i]) && std::isfinite(t_us[i]),
               "layer-time fit '{}': point {} (R = {}, t = {}) is not finite", name, i, r[i],
               t_us[i]);
    mean_r += r[i];
    mean_t += t_us[i];
  }
  mean_r /= static_cast<double>(r.size());
  mean_t /= static_cast<double>(r.size());
  double sxx = 0;
  double sxy = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    sxx += (r[i] - mean_r) * (r[i] - mean_r);
    sxy += (r[i] - mean_r) * (t_us[i] - mean_t);
  }
  ISER_CHECK(sxx > 0, "layer-time fit '{}': all points share R = {}; need two distinct R", name,
             mean_r);
  LayerTimeFit fit;
  fit.name = std::move(name);
  fit.slope_us = sxy / sxx;
  fit.intercept_us = mean_t - fit.slope_us * mean_r;
  fit.source = fmt::format("least-squares fit of {} points", r.size());
  fit.validate();
  return fit;
}

}  // namespace iser::model
