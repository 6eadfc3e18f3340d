#include "torch_file.h"

#include <cstring>

#include <fmt/ranges.h>

#include "iser/error.h"
#include "zip.h"

namespace iser::trace {
namespace {

template <typename T>
int64_t load_as_int64(const char* src) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  return static_cast<int64_t>(v);
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

TorchFile read_torch_file(std::string_view bytes, std::string_view name) {
  TorchFile file;
  file.name = std::string(name);
  ISER_CHECK(looks_like_zip(bytes),
             "{}: not a zip archive; torch.save files of PyTorch < 1.6 (the legacy format) are "
             "not read: load and save again with a current torch",
             name);
  file.entries = read_stored_zip(bytes, name);
  std::string pkl;
  for (const auto& [entry, data] : file.entries) {
    const size_t slash = entry.find('/');
    if (slash != std::string::npos && entry.substr(slash + 1) == "data.pkl") {
      ISER_CHECK(pkl.empty(), "{}: two data.pkl entries ('{}', '{}')", name, pkl, entry);
      pkl = entry;
    }
  }
  ISER_CHECK(!pkl.empty(), "{}: no <archive>/data.pkl entry: not a torch.save file", name);
  file.prefix = pkl.substr(0, pkl.size() - std::string_view("data.pkl").size());
  if (const auto it = file.entries.find(file.prefix + "byteorder"); it != file.entries.end()) {
    ISER_CHECK(it->second == "little", "{}: byteorder is '{}', only little-endian is read", name,
               it->second.substr(0, 16));
  }
  file.pickle = parse_torch_pickle(file.entries.at(pkl), name);
  return file;
}

std::vector<int64_t> TorchFile::read_integers(const PyObject& tensor, std::string_view what) const {
  ISER_CHECK(tensor.kind == PyKind::kTensor, "{}: {} is a {}, expected a tensor", name, what,
             py_kind_name(tensor.kind));
  const size_t elem = torch_dtype_size(tensor.dtype);
  const auto it = entries.find(prefix + "data/" + tensor.text);
  ISER_CHECK(it != entries.end(), "{}: {}: storage '{}' has no data/{} entry", name, what,
             tensor.text.substr(0, 40), tensor.text.substr(0, 40));
  const std::string_view data = it->second;
  ISER_CHECK(static_cast<uint64_t>(tensor.storage_numel) <= data.size() / elem,
             "{}: {}: storage of {} {} elements needs {} bytes, the entry has {}", name, what,
             tensor.storage_numel, torch_dtype_name(tensor.dtype),
             static_cast<uint64_t>(tensor.storage_numel) * elem, data.size());
  uint64_t count = 1;
  for (const int64_t d : tensor.shape) count *= static_cast<uint64_t>(d);  // <= storage_numel
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  if (count == 0) return out;
  using Load = int64_t (*)(const char*);
  Load load = nullptr;
  switch (tensor.dtype) {
    case TorchDType::kU8:
      load = &load_as_int64<uint8_t>;
      break;
    case TorchDType::kI8:
      load = &load_as_int64<int8_t>;
      break;
    case TorchDType::kI16:
      load = &load_as_int64<int16_t>;
      break;
    case TorchDType::kI32:
      load = &load_as_int64<int32_t>;
      break;
    case TorchDType::kI64:
      load = &load_as_int64<int64_t>;
      break;
    default:
      throw Error(fmt::format("{}: {} has dtype {}, expected an integer tensor", name, what,
                              torch_dtype_name(tensor.dtype)));
  }
  // Row-major walk over the (bounds-checked) strides.
  const size_t dims = tensor.shape.size();
  std::vector<int64_t> index(dims, 0);
  for (uint64_t n = 0; n < count; ++n) {
    int64_t offset = tensor.storage_offset;
    for (size_t d = 0; d < dims; ++d) offset += index[d] * tensor.stride[d];
    out.push_back(load(data.data() + static_cast<size_t>(offset) * elem));
    for (size_t d = dims; d-- > 0;) {
      if (++index[d] < tensor.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace iser::trace
