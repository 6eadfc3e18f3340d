// A restricted reader of the pickles that torch.save writes (data.pkl inside its zip): dicts,
// lists, tuples, None, booleans, integers, floats, strings and tensors. It builds plain values
// and executes nothing: the only globals it accepts are torch._utils._rebuild_tensor_v2,
// collections.OrderedDict and the typed torch storages, each interpreted by this reader. Every
// opcode's operands, the stack, marks and memo references are checked; objects live in one
// arena and refer to each other by index, so shared or cyclic references cannot recurse or leak.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace iser::trace {

enum class PyKind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kBytes,
  kList,
  kTuple,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};

enum class TorchDType { kBool, kU8, kI8, kI16, kI32, kI64, kF16, kBF16, kF32, kF64 };

struct PyObject {
  PyKind kind = PyKind::kNone;
  int64_t integer = 0;  // kBool, kInt; kStorage: its element count
  double real = 0.0;    // kFloat
  std::string text;     // kString, kBytes; kGlobal "module.name"; kStorage, kTensor: storage key
  std::vector<uint32_t> items;  // kList, kTuple: elements; kDict: key, value, key, value, ...
  TorchDType dtype = TorchDType::kU8;  // kStorage, kTensor
  int64_t storage_offset = 0;          // kTensor, in elements
  std::vector<int64_t> shape;          // kTensor
  std::vector<int64_t> stride;         // kTensor, in elements
  int64_t storage_numel = 0;           // kTensor: elements of its storage
};

struct Pickle {
  std::vector<PyObject> objects;
  uint32_t root = 0;

  const PyObject& at(uint32_t idx) const { return objects[idx]; }
  // The value stored under a string key of a dict; nullopt when absent.
  std::optional<uint32_t> find(const PyObject& dict, std::string_view key) const;
};

std::string_view py_kind_name(PyKind kind);
size_t torch_dtype_size(TorchDType dtype);
std::string_view torch_dtype_name(TorchDType dtype);

Pickle parse_torch_pickle(std::string_view bytes, std::string_view name);

}  // namespace iser::trace
