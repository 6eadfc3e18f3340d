// Helpers shared by the trace tests: scratch directories, raw safetensors, error matching.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "iser/error.h"
#include "iser/trace.h"

namespace iser::testing {

class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("iser_trace_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A safetensors blob from a literal header and raw data (for malformed-file tests).
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

template <typename T>
std::string le_bytes(std::initializer_list<T> values) {
  std::string out;
  for (const T v : values) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.append(buf, sizeof(T));
  }
  return out;
}

// A token trace [L, T, k] whose id at flat index i is id_at(i).
template <typename IdAt>
TraceData make_token_trace(int num_layers, int num_tokens, int top_k, int num_experts,
                           IdAt&& id_at) {
  TraceData d;
  d.kind = TraceKind::kTokens;
  d.metadata.num_experts = num_experts;
  d.metadata.top_k = top_k;
  d.metadata.num_layers = num_layers;
  d.metadata.num_tokens = num_tokens;
  d.metadata.source = "test tokens";
  d.topk_ids.resize(static_cast<size_t>(num_layers) * num_tokens * top_k);
  for (size_t i = 0; i < d.topk_ids.size(); ++i) d.topk_ids[i] = id_at(i);
  return d;
}

// Expects iser::Error whose message contains every fragment.
inline void expect_error(const std::function<void()>& fn,
                         std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected iser::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) {
      EXPECT_NE(msg.find(f), std::string::npos) << "message '" << msg << "' lacks '" << f << "'";
    }
  }
}

}  // namespace iser::testing
