#include "common.h"

#include <charconv>
#include <fstream>

#include "iser/error.h"

namespace iser::trace {

std::optional<int64_t> parse_decimal(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (*first == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last || first == last) return std::nullopt;
  return value;
}

namespace {

// An option when given, else the file's value; missing both is an error naming the field.
int resolve_dimension(std::string_view name, std::optional<int> option,
                      std::optional<int64_t> from_file, std::string_view field,
                      std::string_view what, std::string_view hint, int max_value) {
  ISER_CHECK(option.has_value() || from_file.has_value(),
             "{}: {} is missing and no {} was given ({})", name, field, what, hint);
  const int64_t v = option ? *option : *from_file;
  ISER_CHECK(v >= 1 && v <= max_value, "{}: {} = {} out of range [1, {}]", name, what, v,
             max_value);
  return static_cast<int>(v);
}

}  // namespace

int resolve_num_experts(std::string_view name, const TraceOptions& options,
                        std::optional<int64_t> from_file, std::string_view field) {
  return resolve_dimension(
      name, options.num_experts, from_file, field, "num_experts",
      "TraceOptions::num_experts (--num-experts); E is never guessed from the largest id",
      kMaxTraceExperts);
}

int resolve_top_k(std::string_view name, const TraceOptions& options,
                  std::optional<int64_t> from_file, std::string_view field) {
  return resolve_dimension(name, options.top_k, from_file, field, "top_k",
                           "TraceOptions::top_k (--top-k)", kMaxTraceTopK);
}

std::string describe(const nlohmann::json& value) {
  if (value.is_array()) return fmt::format("[array of {}]", value.size());
  if (value.is_object()) return fmt::format("{{object of {}}}", value.size());
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::optional<int64_t> json_int(const nlohmann::json& obj, std::initializer_list<const char*> keys,
                                std::string_view name) {
  for (const char* key : keys) {
    const auto it = obj.find(key);
    if (it == obj.end()) continue;
    ISER_CHECK(it->is_number_integer(), "{}: field {} = {} is not an integer", name, key,
               describe(*it));
    return it->get<int64_t>();
  }
  return std::nullopt;
}

std::string json_string(const nlohmann::json& obj, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    const auto it = obj.find(key);
    if (it != obj.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

std::string read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  ISER_CHECK(in.good(), "{}: cannot open file", path.string());
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  ISER_CHECK(size >= 0, "{}: cannot determine the file size", path.string());
  in.seekg(0, std::ios::beg);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), size);
  ISER_CHECK(in.gcount() == size, "{}: read {} of {} bytes", path.string(), in.gcount(), size);
  return bytes;
}

}  // namespace iser::trace
