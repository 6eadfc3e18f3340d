#include "pickle.h"

#include <bit>
#include <cstring>
#include <limits>
#include <unordered_map>

#include <fmt/ranges.h>

#include "iser/error.h"

namespace iser::trace {
namespace {

constexpr size_t kMaxObjects = size_t{1} << 24;
constexpr size_t kMaxTensorDims = 16;

struct StorageType {
  std::string_view global;
  TorchDType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.BoolStorage", TorchDType::kBool}, {"torch.ByteStorage", TorchDType::kU8},
    {"torch.CharStorage", TorchDType::kI8},   {"torch.ShortStorage", TorchDType::kI16},
    {"torch.IntStorage", TorchDType::kI32},   {"torch.LongStorage", TorchDType::kI64},
    {"torch.HalfStorage", TorchDType::kF16},  {"torch.BFloat16Storage", TorchDType::kBF16},
    {"torch.FloatStorage", TorchDType::kF32}, {"torch.DoubleStorage", TorchDType::kF64},
};
constexpr std::string_view kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr std::string_view kOrderedDict = "collections.OrderedDict";

class Unpickler {
 public:
  Unpickler(std::string_view bytes, std::string_view name) : in_(bytes), name_(name) {}

  Pickle run() {
    while (true) {
      const size_t at = pos_;
      const auto op = static_cast<uint8_t>(take(1)[0]);
      if (op == '.') break;
      step(op, at);
    }
    check(stack_.size() == 1 && marks_.empty(), "STOP with {} values on the stack", stack_.size());
    out_.root = stack_.back();
    return std::move(out_);
  }

 private:
  template <typename... Args>
  void check(bool ok, fmt::format_string<Args...> what, Args&&... args) const {
    if (!ok) {
      throw Error(fmt::format("{}: data.pkl at byte {}: {}", name_, pos_,
                              fmt::format(what, std::forward<Args>(args)...)));
    }
  }
  std::string_view take(size_t n) {
    check(n <= in_.size() - pos_, "truncated (needs {} more bytes)", n);
    const auto s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t take_le(size_t n) {
    const auto s = take(n);
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(s[i]);
    return v;
  }
  uint32_t add(PyObject obj) {
    check(out_.objects.size() < kMaxObjects, "more than {} objects", kMaxObjects);
    out_.objects.push_back(std::move(obj));
    return static_cast<uint32_t>(out_.objects.size() - 1);
  }
  uint32_t push(PyObject obj) {
    const uint32_t idx = add(std::move(obj));
    stack_.push_back(idx);
    return idx;
  }
  uint32_t pop() {
    check(stack_.size() > (marks_.empty() ? 0 : marks_.back()), "pop from an empty stack");
    const uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  uint32_t top() const {
    check(stack_.size() > (marks_.empty() ? 0 : marks_.back()), "no value on the stack");
    return stack_.back();
  }
  // Values pushed since the last MARK, which is removed.
  std::vector<uint32_t> pop_mark() {
    check(!marks_.empty(), "no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  PyObject& obj(uint32_t idx) { return out_.objects[idx]; }

  void put_memo(uint64_t key) {
    check(key <= std::numeric_limits<uint32_t>::max(), "memo index {} too large", key);
    memo_[static_cast<uint32_t>(key)] = top();
  }
  void get_memo(uint64_t key) {
    const auto it = memo_.find(static_cast<uint32_t>(key));
    check(key <= std::numeric_limits<uint32_t>::max() && it != memo_.end(),
          "memo index {} was never stored", key);
    stack_.push_back(it->second);
  }
  void push_string(std::string_view s, PyKind kind) {
    PyObject o;
    o.kind = kind;
    o.text = std::string(s);
    push(std::move(o));
  }
  void push_int(int64_t v, PyKind kind = PyKind::kInt) {
    PyObject o;
    o.kind = kind;
    o.integer = v;
    push(std::move(o));
  }
  void push_global(std::string module, std::string qualname) {
    std::string full = module + "." + qualname;
    bool known = full == kRebuildTensor || full == kOrderedDict;
    for (const auto& s : kStorageTypes) known = known || full == s.global;
    check(known,
          "global '{}' is not allowed (only tensors, storages and OrderedDict are read; "
          "nothing is executed)",
          full.substr(0, 80));
    push_string(full, PyKind::kGlobal);
  }
  void push_sequence(std::vector<uint32_t> items, PyKind kind) {
    PyObject o;
    o.kind = kind;
    o.items = std::move(items);
    push(std::move(o));
  }
  void set_items(uint32_t dict, const std::vector<uint32_t>& kv) {
    check(obj(dict).kind == PyKind::kDict, "SETITEM(S) on a {}", py_kind_name(obj(dict).kind));
    check(kv.size() % 2 == 0, "SETITEMS with an odd number ({}) of values", kv.size());
    for (size_t i = 0; i < kv.size(); i += 2) {
      const PyObject& key = obj(kv[i]);
      check(key.kind == PyKind::kString || key.kind == PyKind::kInt,
            "dict key is a {} (only strings and integers are read)", py_kind_name(key.kind));
      auto& items = obj(dict).items;
      bool replaced = false;
      for (size_t j = 0; j < items.size() && !replaced; j += 2) {
        const PyObject& other = obj(items[j]);
        if (other.kind == key.kind && other.text == key.text && other.integer == key.integer) {
          items[j + 1] = kv[i + 1];
          replaced = true;
        }
      }
      if (!replaced) {
        items.push_back(kv[i]);
        items.push_back(kv[i + 1]);
      }
    }
  }
  void append(uint32_t list, const std::vector<uint32_t>& values) {
    check(obj(list).kind == PyKind::kList, "APPEND(S) on a {}", py_kind_name(obj(list).kind));
    auto& items = obj(list).items;
    items.insert(items.end(), values.begin(), values.end());
  }
  void persistent_load() {
    const PyObject& pid = obj(pop());
    check(pid.kind == PyKind::kTuple && pid.items.size() == 5,
          "persistent id is not a 5-tuple ('storage', type, key, location, numel)");
    const PyObject& tag = obj(pid.items[0]);
    const PyObject& type = obj(pid.items[1]);
    const PyObject& key = obj(pid.items[2]);
    const PyObject& location = obj(pid.items[3]);
    const PyObject& numel = obj(pid.items[4]);
    check(tag.kind == PyKind::kString && tag.text == "storage",
          "persistent id tag is not 'storage'");
    check(type.kind == PyKind::kGlobal && type.text.ends_with("Storage"),
          "persistent id names no typed storage");
    check(key.kind == PyKind::kString && location.kind == PyKind::kString,
          "persistent id key / location are not strings");
    check(numel.kind == PyKind::kInt && numel.integer >= 0, "storage size is not a count");
    PyObject s;
    s.kind = PyKind::kStorage;
    for (const auto& st : kStorageTypes) {
      if (st.global == type.text) s.dtype = st.dtype;
    }
    s.text = key.text;
    s.integer = numel.integer;
    push(std::move(s));
  }
  std::vector<int64_t> int_tuple(uint32_t idx, std::string_view what) {
    const PyObject& t = obj(idx);
    check(t.kind == PyKind::kTuple && t.items.size() <= kMaxTensorDims,
          "tensor {} is not a tuple of at most {} integers", what, kMaxTensorDims);
    std::vector<int64_t> out;
    for (const uint32_t i : t.items) {
      check(obj(i).kind == PyKind::kInt && obj(i).integer >= 0,
            "tensor {} holds a value that is not a non-negative integer", what);
      out.push_back(obj(i).integer);
    }
    return out;
  }
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, metadata]).
  void rebuild_tensor(const std::vector<uint32_t>& args) {
    check(args.size() == 6 || args.size() == 7, "_rebuild_tensor_v2 takes 6 or 7 arguments, got {}",
          args.size());
    const PyObject& storage = obj(args[0]);
    check(storage.kind == PyKind::kStorage, "tensor storage is a {}", py_kind_name(storage.kind));
    check(obj(args[1]).kind == PyKind::kInt && obj(args[1]).integer >= 0,
          "tensor storage offset is not a non-negative integer");
    PyObject t;
    t.kind = PyKind::kTensor;
    t.dtype = storage.dtype;
    t.text = storage.text;
    t.storage_numel = storage.integer;
    t.storage_offset = obj(args[1]).integer;
    t.shape = int_tuple(args[2], "size");
    t.stride = int_tuple(args[3], "stride");
    check(t.shape.size() == t.stride.size(), "tensor size has {} dims but stride {}",
          t.shape.size(), t.stride.size());
    // Every element must lie inside the storage; the element count may not exceed the storage's
    // (so the file's bytes bound the memory a tensor can ask for).
    bool empty = false;
    for (const int64_t d : t.shape) empty = empty || d == 0;
    if (!empty) {
      const auto limit = static_cast<uint64_t>(t.storage_numel);
      auto last = static_cast<uint64_t>(t.storage_offset);
      check(last < limit, "tensor offset {} outside its storage of {} elements", last, limit);
      uint64_t elements = 1;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        const auto size = static_cast<uint64_t>(t.shape[d]);
        const auto stride = static_cast<uint64_t>(t.stride[d]);
        check(size <= limit && elements <= limit / size,
              "tensor size {} exceeds its storage of {} elements",
              fmt::format("[{}]", fmt::join(t.shape, ",")), limit);
        elements *= size;
        if (size > 1) {
          check(stride >= 1 && size - 1 <= (limit - 1 - last) / stride,
                "tensor size/stride reach past its storage of {} elements", limit);
          last += (size - 1) * stride;
        }
      }
    }
    push(std::move(t));
  }
  void reduce() {
    const uint32_t args_idx = pop();
    const PyObject& callable = obj(pop());
    const PyObject& args = obj(args_idx);
    check(callable.kind == PyKind::kGlobal && args.kind == PyKind::kTuple,
          "REDUCE needs an allowed global and an argument tuple");
    if (callable.text == kOrderedDict) {
      check(args.items.empty(), "OrderedDict with arguments");
      push_sequence({}, PyKind::kDict);
    } else if (callable.text == kRebuildTensor) {
      const std::vector<uint32_t> items = args.items;
      rebuild_tensor(items);
    } else {
      check(false, "cannot call '{}'", callable.text);
    }
  }
  std::string line() {
    const size_t end = in_.find('\n', pos_);
    check(end != std::string_view::npos && end - pos_ <= 256, "GLOBAL name is not a short line");
    std::string s(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  void step(uint8_t op, size_t at);

  std::string_view in_;
  std::string_view name_;
  size_t pos_ = 0;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, uint32_t> memo_;
  Pickle out_;
};

void Unpickler::step(uint8_t op, size_t at) {
  switch (op) {
    case 0x80: {  // PROTO
      const uint64_t proto = take_le(1);
      check(proto >= 2 && proto <= 5, "pickle protocol {} (torch.save writes 2)", proto);
      break;
    }
    case 0x95:  // FRAME: a length hint only
      take_le(8);
      break;
    case '(':
      marks_.push_back(stack_.size());
      break;
    case '}':
      push_sequence({}, PyKind::kDict);
      break;
    case ']':
      push_sequence({}, PyKind::kList);
      break;
    case ')':
      push_sequence({}, PyKind::kTuple);
      break;
    case 't':
      push_sequence(pop_mark(), PyKind::kTuple);
      break;
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      std::vector<uint32_t> items(op - 0x84);
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      push_sequence(std::move(items), PyKind::kTuple);
      break;
    }
    case 'a': {
      const uint32_t value = pop();
      append(top(), {value});
      break;
    }
    case 'e': {
      auto values = pop_mark();
      append(top(), values);
      break;
    }
    case 's': {
      const uint32_t value = pop();
      const uint32_t key = pop();
      set_items(top(), {key, value});
      break;
    }
    case 'u': {
      auto kv = pop_mark();
      set_items(top(), kv);
      break;
    }
    case 'N':
      push(PyObject{});
      break;
    case 0x88:
    case 0x89:
      push_int(op == 0x88 ? 1 : 0, PyKind::kBool);
      break;
    case 'J':
      push_int(static_cast<int32_t>(static_cast<uint32_t>(take_le(4))));
      break;
    case 'K':
      push_int(static_cast<int64_t>(take_le(1)));
      break;
    case 'M':
      push_int(static_cast<int64_t>(take_le(2)));
      break;
    case 0x8a: {  // LONG1: little-endian two's complement of n bytes
      const uint64_t n = take_le(1);
      check(n <= 8, "integer of {} bytes does not fit 64 bits", n);
      uint64_t v = n == 0 ? 0 : take_le(n);
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);
      push_int(std::bit_cast<int64_t>(v));
      break;
    }
    case 'G': {  // BINFLOAT, big-endian
      uint64_t bits = 0;
      for (const char c : take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
      PyObject o;
      o.kind = PyKind::kFloat;
      o.real = std::bit_cast<double>(bits);
      push(std::move(o));
      break;
    }
    case 'X':
      push_string(take(take_le(4)), PyKind::kString);
      break;
    case 0x8c:
      push_string(take(take_le(1)), PyKind::kString);
      break;
    case 'B':
      push_string(take(take_le(4)), PyKind::kBytes);
      break;
    case 'C':
      push_string(take(take_le(1)), PyKind::kBytes);
      break;
    case 'q':
      put_memo(take_le(1));
      break;
    case 'r':
      put_memo(take_le(4));
      break;
    case 0x94:
      put_memo(memo_.size());
      break;
    case 'h':
      get_memo(take_le(1));
      break;
    case 'j':
      get_memo(take_le(4));
      break;
    case 'c': {
      std::string module = line();
      std::string qualname = line();
      push_global(std::move(module), std::move(qualname));
      break;
    }
    case 0x93: {  // STACK_GLOBAL
      const PyObject& qualname = obj(pop());
      const PyObject& module = obj(pop());
      check(module.kind == PyKind::kString && qualname.kind == PyKind::kString,
            "STACK_GLOBAL operands are not strings");
      push_global(module.text, qualname.text);
      break;
    }
    case 'R':
      reduce();
      break;
    case 'Q':
      persistent_load();
      break;
    case '0':
      pop();
      break;
    default:
      pos_ = at;
      check(false, "opcode 0x{:02x} is not one torch.save writes for plain data", op);
  }
}

}  // namespace

std::optional<uint32_t> Pickle::find(const PyObject& dict, std::string_view key) const {
  if (dict.kind != PyKind::kDict) return std::nullopt;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const PyObject& k = objects[dict.items[i]];
    if (k.kind == PyKind::kString && k.text == key) return dict.items[i + 1];
  }
  return std::nullopt;
}

std::string_view py_kind_name(PyKind kind) {
  constexpr std::string_view kNames[] = {"None", "bool",  "int",  "float",  "str",     "bytes",
                                         "list", "tuple", "dict", "global", "storage", "tensor"};
  return kNames[static_cast<size_t>(kind)];
}

size_t torch_dtype_size(TorchDType dtype) {
  constexpr size_t kSizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return kSizes[static_cast<size_t>(dtype)];
}

std::string_view torch_dtype_name(TorchDType dtype) {
  constexpr std::string_view kNames[] = {"bool",  "uint8",   "int8",     "int16",   "int32",
                                         "int64", "float16", "bfloat16", "float32", "float64"};
  return kNames[static_cast<size_t>(dtype)];
}

Pickle parse_torch_pickle(std::string_view bytes, std::string_view name) {
  return Unpickler(bytes, name).run();
}

}  // namespace iser::trace
