// Helpers shared by the trace readers (internal).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "iser/trace.h"

namespace iser::trace {

// Upper bounds that keep hostile inputs from asking for absurd allocations; real models are far
// below them (E <= 1024 today, k <= 16, L <= 128).
inline constexpr int kMaxTraceExperts = 1 << 16;
inline constexpr int kMaxTraceTopK = 64;
inline constexpr int kMaxTraceLayers = 1 << 12;
// Counts per (layer, expert) cell; sums over up to 2^20 cells then cannot overflow int64.
inline constexpr int64_t kMaxCount = int64_t{1} << 40;

// Strict decimal integer (optional sign, digits only); nullopt on anything else or overflow.
std::optional<int64_t> parse_decimal(std::string_view text);

// E and k from options (preferred) or the file's own fields; errors name the file and field.
int resolve_num_experts(std::string_view name, const TraceOptions& options,
                        std::optional<int64_t> from_file, std::string_view field);
int resolve_top_k(std::string_view name, const TraceOptions& options,
                  std::optional<int64_t> from_file, std::string_view field);

// A JSON value for an error message: scalars as JSON text (cut at 60 characters), containers
// by kind and size only (json::dump recurses, and hostile input can nest arbitrarily deep).
std::string describe(const nlohmann::json& value);

// The first of `keys` present in obj as an integer (a present non-integer throws); nullopt when
// none is present.
std::optional<int64_t> json_int(const nlohmann::json& obj, std::initializer_list<const char*> keys,
                                std::string_view name);
// The first of `keys` present in obj as a string; empty when none is.
std::string json_string(const nlohmann::json& obj, std::initializer_list<const char*> keys);

// Whole file into memory (the readers' working set is proportional to it anyway).
std::string read_file_bytes(const std::filesystem::path& path);

}  // namespace iser::trace
