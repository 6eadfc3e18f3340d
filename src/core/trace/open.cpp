// Format detection and the entry points that read files (docs/design.md §8).
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "common.h"
#include "iser/error.h"
#include "iser/trace.h"
#include "zip.h"

namespace iser {
namespace {

struct FormatName {
  TraceFormat format;
  std::string_view name;
};
constexpr FormatName kFormats[] = {
    {TraceFormat::kAuto, "auto"},     {TraceFormat::kSafetensors, "safetensors"},
    {TraceFormat::kCsv, "csv"},       {TraceFormat::kJsonl, "jsonl"},
    {TraceFormat::kTrtllm, "trtllm"}, {TraceFormat::kVllm, "vllm"},
    {TraceFormat::kSglang, "sglang"},
};

constexpr std::string_view kBundledFile = "dsv41-flash-coding.safetensors";
constexpr std::string_view kBundledTopics[] = {"dsv41-flash-coding.safetensors",
                                               "dsv41-flash-topic-cpp.safetensors",
                                               "dsv41-flash-topic-medical.safetensors"};

// A bundled data file: in $ISER_DATA_DIR when set (an installed or relocated binary), else in
// the source tree's data/ directory.
// Folders where an installed copy keeps the bundled data, beside the binary that holds this code:
// `<prefix>/bin/iser` -> `<prefix>/share/iser/data` (cmake --install), `iser/bin/iser` and the
// Python module `iser/_core*.so` -> `iser/data` (the Python package).
std::vector<std::filesystem::path> installed_data_dirs() {
  std::vector<std::filesystem::path> binaries;
  std::error_code ec;
  if (auto exe = std::filesystem::read_symlink("/proc/self/exe", ec); !ec) binaries.push_back(exe);
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&installed_data_dirs), &info) != 0 &&
      info.dli_fname != nullptr && std::strchr(info.dli_fname, '/') != nullptr) {
    binaries.emplace_back(info.dli_fname);
  }
  std::vector<std::filesystem::path> dirs;
  for (const auto& binary : binaries) {
    const auto dir = binary.parent_path();
    dirs.push_back(dir / "data");
    dirs.push_back(dir.parent_path() / "data");
    dirs.push_back(dir.parent_path() / "share" / "iser" / "data");
  }
  return dirs;
}

std::filesystem::path bundled_file(std::string_view file) {
  if (const char* env = std::getenv("ISER_DATA_DIR"); env != nullptr && *env != '\0') {
    auto p = std::filesystem::path(env) / file;
    ISER_CHECK(std::filesystem::exists(p), "{}: bundled data not found (ISER_DATA_DIR = {})",
               p.string(), env);
    return p;
  }
  std::error_code ec;
  for (const auto& dir : installed_data_dirs()) {
    if (std::filesystem::exists(dir / file, ec)) return dir / file;
  }
  auto p = std::filesystem::path(ISER_DATA_DIR) / file;
  ISER_CHECK(std::filesystem::exists(p),
             "{}: bundled data not found; set ISER_DATA_DIR to the directory holding {}",
             p.string(), file);
  return p;
}

// Peeks at the first bytes of a file without reading it all.
std::string head_of(const std::filesystem::path& path, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ISER_CHECK(f != nullptr, "{}: cannot open file", path.string());
  std::string buf(n, '\0');
  buf.resize(std::fread(buf.data(), 1, n, f));
  std::fclose(f);
  return buf;
}

}  // namespace

TraceFormat parse_trace_format(std::string_view name) {
  for (const auto& f : kFormats) {
    if (f.name == name) return f.format;
  }
  throw Error(fmt::format(
      "unknown trace format '{}' (expected auto, safetensors, csv, jsonl, trtllm, vllm, sglang)",
      name));
}

std::string_view trace_format_name(TraceFormat format) {
  for (const auto& f : kFormats) {
    if (f.format == format) return f.name;
  }
  return "?";
}

TraceFormat detect_trace_format(const std::filesystem::path& path) {
  std::error_code ec;
  ISER_CHECK(std::filesystem::exists(path, ec), "{}: no such file or directory", path.string());
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / "meta_info.json", ec)) return TraceFormat::kTrtllm;
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      if (entry.path().extension() == ".pt") return TraceFormat::kSglang;
    }
    throw Error(fmt::format(
        "{}: a directory must be a TensorRT-LLM dump (meta_info.json + rank<r>.safetensors) or "
        "SGLang per_pass / per_token dumps (one .pt file per rank)",
        path.string()));
  }
  const std::string ext = path.extension().string();
  if (ext == ".safetensors") return TraceFormat::kSafetensors;
  if (ext == ".jsonl") return TraceFormat::kJsonl;
  if (ext == ".csv") return TraceFormat::kCsv;
  if (ext == ".json") return TraceFormat::kSglang;
  // Unknown extension: sniff the content.
  const std::string head = head_of(path, 64);
  if (trace::looks_like_zip(head)) return TraceFormat::kSglang;  // torch.save (.pt)
  if (head.rfind("layer,", 0) == 0) return TraceFormat::kCsv;
  const size_t first = head.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && head[first] == '{') {
    return head.find("logical_count") != std::string::npos ? TraceFormat::kSglang
                                                           : TraceFormat::kJsonl;
  }
  if (head.size() >= 9 && head[8] == '{') return TraceFormat::kSafetensors;
  throw Error(fmt::format("{}: cannot tell the trace format (name it: TraceFormat, --format)",
                          path.string()));
}

TraceData read_trace_data(const std::filesystem::path& path, const TraceOptions& options,
                          TraceFormat format) {
  if (format == TraceFormat::kAuto) format = detect_trace_format(path);
  const std::string name = path.string();
  if (format == TraceFormat::kTrtllm) return read_trtllm_dump(path, options);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    ISER_CHECK(format == TraceFormat::kSglang,
               "{}: a directory is read as a TensorRT-LLM dump or SGLang .pt rank files, not as {}",
               name, trace_format_name(format));
    return read_torch_dump_dir(path, options);
  }
  const std::string bytes = trace::read_file_bytes(path);
  // torch.save files are zip archives, whichever engine wrote them (SGLang, vLLM tensors).
  if (trace::looks_like_zip(bytes) &&
      (format == TraceFormat::kSglang || format == TraceFormat::kVllm)) {
    return parse_torch_trace(bytes, name, options);
  }
  TraceData data;
  switch (format) {
    case TraceFormat::kSafetensors:
    case TraceFormat::kVllm:
      data = parse_safetensors_trace(bytes, name, options);
      break;
    case TraceFormat::kJsonl:
      data = parse_jsonl_trace(bytes, name, options);
      break;
    case TraceFormat::kCsv:
      data = parse_csv_histograms(bytes, name, options);
      break;
    case TraceFormat::kSglang:
      data = parse_sglang_trace(bytes, name, options);
      break;
    default:
      throw Error("internal error: unhandled trace format");
  }
  return data;
}

std::unique_ptr<RoutingSource> open_trace(const std::filesystem::path& path,
                                          const TraceOptions& options) {
  return make_routing_source(read_trace_data(path, options), options);
}

std::filesystem::path bundled_default_trace() {
  return bundled_file(kBundledFile);
}

std::vector<std::filesystem::path> bundled_drift_topics() {
  std::vector<std::filesystem::path> paths;
  for (const std::string_view file : kBundledTopics) paths.push_back(bundled_file(file));
  return paths;
}

}  // namespace iser
