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

int resolve_num_experts(std::string_view name, const TraceOptions& options,
                        std::optional<int64_t> from_file, std::string_view field) {
  int64_t e = 0;
  if (options.num_experts) {
    e = *options.num_experts;
  } else {
    ISER_CHECK(from_file.has_value(),
               "{}: {} is missing and no expert count was given (--num-experts / "
               "TraceOptions::num_experts); E is never guessed from the largest id",
               name, field);
    e = *from_file;
  }
  ISER_CHECK(e >= 1 && e <= kMaxTraceExperts, "{}: num_experts = {} out of range [1, {}]", name, e,
             kMaxTraceExperts);
  return static_cast<int>(e);
}

int resolve_top_k(std::string_view name, const TraceOptions& options,
                  std::optional<int64_t> from_file, std::string_view field) {
  int64_t k = 0;
  if (options.top_k) {
    k = *options.top_k;
  } else {
    ISER_CHECK(from_file.has_value(),
               "{}: {} is missing and no top-k was given (--top-k / TraceOptions::top_k)", name,
               field);
    k = *from_file;
  }
  ISER_CHECK(k >= 1 && k <= kMaxTraceTopK, "{}: top_k = {} out of range [1, {}]", name, k,
             kMaxTraceTopK);
  return static_cast<int>(k);
}

std::string describe(const nlohmann::json& value) {
  if (value.is_array()) return fmt::format("[array of {}]", value.size());
  if (value.is_object()) return fmt::format("{{object of {}}}", value.size());
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
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
