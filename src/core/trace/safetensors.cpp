#include "safetensors.h"
#include "common.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "common.h"
#include "iser/error.h"

namespace iser::trace {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; add byte swaps for big-endian hosts");

struct DTypeEntry {
  std::string_view name;
  DType dtype;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {"BOOL", DType::kBool, 1}, {"U8", DType::kU8, 1},   {"I8", DType::kI8, 1},
    {"I16", DType::kI16, 2},   {"U16", DType::kU16, 2}, {"F16", DType::kF16, 2},
    {"BF16", DType::kBF16, 2}, {"I32", DType::kI32, 4}, {"U32", DType::kU32, 4},
    {"F32", DType::kF32, 4},   {"I64", DType::kI64, 8}, {"U64", DType::kU64, 8},
    {"F64", DType::kF64, 8},
};

const DTypeEntry& entry_of(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  throw Error("internal error: unknown dtype enum");
}

// A non-negative JSON integer that fits in int64 (rejects floats, negatives, booleans).
bool json_to_u63(const nlohmann::json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  if (j.is_number_integer()) {
    const auto v = j.get<int64_t>();
    if (v < 0) return false;
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

template <typename T>
void load_widened(const char* src, uint64_t count, std::vector<int64_t>& out) {
  for (uint64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    // NOLINTNEXTLINE(bugprone-signed-char-misuse): I8 ids sign-extend on purpose (-1 = invalid).
    out[i] = static_cast<int64_t>(v);
  }
}

template <typename T>
void store_narrowed(const TensorToWrite& t, std::string& out) {
  for (size_t i = 0; i < t.values.size(); ++i) {
    const int64_t v = t.values[i];
    ISER_CHECK(v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                   v <= static_cast<int64_t>(std::numeric_limits<T>::max()),
               "tensor '{}': value {} at element {} does not fit dtype {}", t.name, v, i,
               dtype_name(t.dtype));
    const auto narrow = static_cast<T>(v);
    char buf[sizeof(T)];
    std::memcpy(buf, &narrow, sizeof(T));
    out.append(buf, sizeof(T));
  }
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  return entry_of(dtype).name;
}
size_t dtype_size(DType dtype) {
  return entry_of(dtype).size;
}

const TensorInfo* SafetensorsView::find(std::string_view tensor_name) const {
  const auto it = std::lower_bound(
      tensors.begin(), tensors.end(), tensor_name,
      [](const TensorInfo& t, std::string_view n) { return std::string_view(t.name) < n; });
  return it != tensors.end() && it->name == tensor_name ? &*it : nullptr;
}

std::vector<int64_t> SafetensorsView::read_integers(const TensorInfo& tensor) const {
  std::vector<int64_t> out(tensor.num_elements);
  const char* src = data.data() + tensor.begin;
  switch (tensor.dtype) {
    case DType::kU8:
      load_widened<uint8_t>(src, tensor.num_elements, out);
      break;
    case DType::kI8:
      load_widened<int8_t>(src, tensor.num_elements, out);
      break;
    case DType::kI16:
      load_widened<int16_t>(src, tensor.num_elements, out);
      break;
    case DType::kU16:
      load_widened<uint16_t>(src, tensor.num_elements, out);
      break;
    case DType::kI32:
      load_widened<int32_t>(src, tensor.num_elements, out);
      break;
    case DType::kU32:
      load_widened<uint32_t>(src, tensor.num_elements, out);
      break;
    case DType::kI64:
      load_widened<int64_t>(src, tensor.num_elements, out);
      break;
    default:
      throw Error(fmt::format("{}: tensor '{}' has dtype {}, expected an integer dtype", name,
                              tensor.name, tensor.dtype_name));
  }
  return out;
}

SafetensorsView parse_safetensors(std::string_view bytes, std::string_view name) {
  SafetensorsView view;
  view.name = std::string(name);
  ISER_CHECK(bytes.size() >= 8,
             "{}: file has {} bytes, too short for the 8-byte safetensors header length", name,
             bytes.size());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  ISER_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the {}-byte limit", name,
             header_len, kMaxHeaderBytes);
  ISER_CHECK(header_len <= bytes.size() - 8,
             "{}: header length {} exceeds the {} bytes after the length field (truncated file?)",
             name, header_len, bytes.size() - 8);
  const std::string_view header = bytes.substr(8, header_len);
  view.data = bytes.substr(8 + header_len);

  const auto json = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  ISER_CHECK(!json.is_discarded(), "{}: header is not valid JSON", name);
  ISER_CHECK(json.is_object(), "{}: header JSON is a {}, expected an object", name,
             json.type_name());

  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      ISER_CHECK(value.is_object(), "{}: __metadata__ is a {}, expected an object", name,
                 value.type_name());
      for (const auto& [mkey, mvalue] : value.items()) {
        ISER_CHECK(mvalue.is_string(), "{}: __metadata__.{} is a {}, expected a string", name, mkey,
                   mvalue.type_name());
        view.metadata[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    ISER_CHECK(value.is_object(), "{}: tensor '{}' entry is a {}, expected an object", name, key,
               value.type_name());
    TensorInfo t;
    t.name = key;
    const auto dtype = value.find("dtype");
    ISER_CHECK(dtype != value.end() && dtype->is_string(), "{}: tensor '{}' lacks a string dtype",
               name, key);
    t.dtype_name = dtype->get<std::string>();
    const auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                    [&](const DTypeEntry& e) { return e.name == t.dtype_name; });
    ISER_CHECK(known != std::end(kDTypes), "{}: tensor '{}' has unknown dtype '{}'", name, key,
               t.dtype_name);
    t.dtype = known->dtype;

    const auto shape = value.find("shape");
    ISER_CHECK(shape != value.end() && shape->is_array(), "{}: tensor '{}' lacks a shape array",
               name, key);
    for (const auto& dim : *shape) {
      uint64_t d = 0;
      ISER_CHECK(json_to_u63(dim, d), "{}: tensor '{}' has invalid shape entry {}", name, key,
                 describe(dim));
      t.shape.push_back(static_cast<int64_t>(d));
    }
    // Elements may not exceed the data bytes, so the running product is bounded before overflow.
    const bool empty = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
    uint64_t elements = 1;
    for (const int64_t d : t.shape) {
      if (empty) break;
      ISER_CHECK(static_cast<uint64_t>(d) <= view.data.size() &&
                     elements <= view.data.size() / static_cast<uint64_t>(d),
                 "{}: tensor '{}' shape {} has more elements than the {}-byte data section", name,
                 key, fmt::format("[{}]", fmt::join(t.shape, ",")), view.data.size());
      elements *= static_cast<uint64_t>(d);
    }
    t.num_elements = empty ? 0 : elements;

    const auto offsets = value.find("data_offsets");
    ISER_CHECK(offsets != value.end() && offsets->is_array() && offsets->size() == 2,
               "{}: tensor '{}' lacks data_offsets [begin, end]", name, key);
    ISER_CHECK(json_to_u63((*offsets)[0], t.begin) && json_to_u63((*offsets)[1], t.end),
               "{}: tensor '{}' has invalid data_offsets {}", name, key, describe(*offsets));
    ISER_CHECK(t.begin <= t.end && t.end <= view.data.size(),
               "{}: tensor '{}' data_offsets [{}, {}] outside the {}-byte data section", name, key,
               t.begin, t.end, view.data.size());
    const uint64_t expected = t.num_elements * known->size;  // <= data size * 8, no overflow
    ISER_CHECK(t.end - t.begin == expected,
               "{}: tensor '{}' shape {} x {} needs {} bytes but data_offsets span {}", name, key,
               fmt::format("[{}]", fmt::join(t.shape, ",")), t.dtype_name, expected,
               t.end - t.begin);
    view.tensors.push_back(std::move(t));
  }

  // Byte ranges may not overlap (empty tensors occupy nothing).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : view.tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    ISER_CHECK(by_offset[i - 1]->end <= by_offset[i]->begin,
               "{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", name, by_offset[i - 1]->name,
               by_offset[i - 1]->begin, by_offset[i - 1]->end, by_offset[i]->name,
               by_offset[i]->begin, by_offset[i]->end);
  }
  std::sort(view.tensors.begin(), view.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return view;
}

std::string serialize_safetensors(const std::map<std::string, std::string>& metadata,
                                  const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& t : tensors) {
    ISER_CHECK(t.name != "__metadata__", "a tensor may not be named __metadata__");
    uint64_t elements = 1;
    for (const int64_t d : t.shape) {
      ISER_CHECK(d >= 0, "tensor '{}': negative dimension {}", t.name, d);
      elements *= static_cast<uint64_t>(d);
    }
    ISER_CHECK(elements == t.values.size(), "tensor '{}': shape holds {} elements, {} values given",
               t.name, elements, t.values.size());
    const size_t begin = data.size();
    switch (t.dtype) {
      case DType::kI16:
        store_narrowed<int16_t>(t, data);
        break;
      case DType::kI32:
        store_narrowed<int32_t>(t, data);
        break;
      case DType::kI64:
        store_narrowed<int64_t>(t, data);
        break;
      default:
        throw Error(fmt::format("tensor '{}': writer supports I16/I32/I64, not {}", t.name,
                                dtype_name(t.dtype)));
    }
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out += text;
  out += data;
  return out;
}

}  // namespace iser::trace
