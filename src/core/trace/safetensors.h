// Minimal, strict safetensors container (https://huggingface.co/docs/safetensors): 8-byte
// little-endian header length N, N bytes of JSON header, then the raw little-endian tensor data.
// The parser checks everything a hostile file could get wrong (header length vs file size, JSON,
// dtypes, shapes vs byte ranges, ranges in bounds and non-overlapping) and never reads outside the
// buffer it is given.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace iser::trace {

enum class DType { kBool, kU8, kI8, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64 };

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::string dtype_name;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
  uint64_t num_elements = 0;
};

// NOTE: the view refers to the caller's bytes; keep them alive while it is used.
struct SafetensorsView {
  std::string name;  // for messages
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;  // header order is not kept: sorted by name
  std::string_view data;            // the data section

  const TensorInfo* find(std::string_view tensor_name) const;
  // Integer tensors (I16/I32/I64, also U8/I8/U16/U32) widened to int64; other dtypes throw.
  std::vector<int64_t> read_integers(const TensorInfo& tensor) const;
};

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the safetensors reference limit

SafetensorsView parse_safetensors(std::string_view bytes, std::string_view name);

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kI32;
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // narrowed to dtype on write (throws when a value does not fit)
};

// Serialises tensors in the given order with 8-byte-aligned header padding.
std::string serialize_safetensors(const std::map<std::string, std::string>& metadata,
                                  const std::vector<TensorToWrite>& tensors);

std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);

}  // namespace iser::trace
