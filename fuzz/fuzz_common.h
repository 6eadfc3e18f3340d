// Shared body of the parser fuzz targets: parse, and when the input is accepted, exercise the
// routing source on one small invocation. iser::Error is the only acceptable failure; anything
// else (another exception, a sanitizer report, a crash) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "iser/error.h"
#include "iser/trace.h"

namespace iser::fuzz {

// The first byte picks options so that both "E from the file" and "E given" paths run.
inline TraceOptions options_from(std::string_view& input) {
  TraceOptions o;
  if (input.empty()) return o;
  const auto flags = static_cast<uint8_t>(input[0]);
  input.remove_prefix(1);
  if (flags & 1) o.num_experts = 1 + (flags >> 4);
  if (flags & 2) o.top_k = 1 + ((flags >> 2) & 3);
  o.skip_profile_rows = (flags & 4) != 0;
  o.skip_rows = (flags & 8) ? 1 : 0;
  return o;
}

template <typename Parse>
int run(const uint8_t* data, size_t size, Parse&& parse) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const TraceOptions options = options_from(input);
  try {
    TraceData parsed = parse(input, options);
    const auto source = make_routing_source(std::move(parsed), options);
    const int layers = source->metadata().num_layers;
    const auto iterations = source->num_iterations(1, 2);
    if (!iterations || *iterations > 0) {
      source->counts(layers - 1, 0, 1, 2);
      source->tokens(0, 0, 1, 2);
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace iser::fuzz
