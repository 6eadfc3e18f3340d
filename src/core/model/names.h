// Internal helpers shared by the model sources.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "iser/error.h"

namespace iser::model {

// ASCII case-insensitive equality (preset names).
bool names_equal(std::string_view a, std::string_view b);

// The preset whose `name` matches (case-insensitively), or nullptr.
template <class Preset>
const Preset* match_preset(std::span<const Preset> presets, std::string_view name) {
  for (const Preset& preset : presets) {
    if (names_equal(preset.name, name)) return &preset;
  }
  return nullptr;
}

// "a, b, c": the presets' names, for error messages.
template <class Preset>
std::string preset_names(std::span<const Preset> presets) {
  std::string known;
  for (const Preset& preset : presets) known += (known.empty() ? "" : ", ") + preset.name;
  return known;
}

// The preset whose `name` matches, or an error listing the known names.
template <class Preset>
const Preset& find_preset(std::span<const Preset> presets, std::string_view name,
                          std::string_view kind) {
  if (const Preset* preset = match_preset(presets, name)) return *preset;
  throw Error(
      fmt::format("unknown {} '{}': known presets are {}", kind, name, preset_names(presets)));
}

}  // namespace iser::model
