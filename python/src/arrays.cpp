#include "arrays.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace iser::python {
namespace {

// Calls f(const T*) with the array's element type; throws for types that are not real numbers.
template <class F>
void visit_real(const AnyArray& a, std::string_view name, F&& f) {
  const auto dt = a.dtype();
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (dt.lanes == 1 && code == Code::Int) {
    switch (dt.bits) {
      case 8:
        return f(static_cast<const int8_t*>(a.data()));
      case 16:
        return f(static_cast<const int16_t*>(a.data()));
      case 32:
        return f(static_cast<const int32_t*>(a.data()));
      case 64:
        return f(static_cast<const int64_t*>(a.data()));
      default:
        break;
    }
  } else if (dt.lanes == 1 && code == Code::UInt) {
    switch (dt.bits) {
      case 8:
        return f(static_cast<const uint8_t*>(a.data()));
      case 16:
        return f(static_cast<const uint16_t*>(a.data()));
      case 32:
        return f(static_cast<const uint32_t*>(a.data()));
      case 64:
        return f(static_cast<const uint64_t*>(a.data()));
      default:
        break;
    }
  } else if (dt.lanes == 1 && code == Code::Float) {
    switch (dt.bits) {
      case 32:
        return f(static_cast<const float*>(a.data()));
      case 64:
        return f(static_cast<const double*>(a.data()));
      default:
        break;
    }
  }
  throw Error(fmt::format("{}: dtype {} is not supported (expected integers or reals)", name,
                          dtype_name(dt)));
}

// Offset (in elements) of the i-th element in row-major order.
int64_t element_offset(const AnyArray& a, size_t i) {
  int64_t offset = 0;
  for (size_t d = a.ndim(); d-- > 0;) {
    const size_t extent = a.shape(d);
    offset += static_cast<int64_t>(i % extent) * a.stride(d);
    i /= extent;
  }
  return offset;
}

bool is_row_major(const AnyArray& a) {
  int64_t expected = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(d));
  }
  return true;
}

// Row-major index i as "[r][c]" for messages.
std::string index_string(const AnyArray& a, size_t i) {
  std::string out;
  for (size_t d = a.ndim(); d-- > 0;) {
    out = fmt::format("[{}]", i % a.shape(d)) + out;
    i /= a.shape(d);
  }
  return out;
}

}  // namespace

std::string dtype_name(nb::dlpack::dtype dtype) {
  using Code = nb::dlpack::dtype_code;
  const char* kind = "unknown";
  switch (static_cast<Code>(dtype.code)) {
    case Code::Int:
      kind = "int";
      break;
    case Code::UInt:
      kind = "uint";
      break;
    case Code::Float:
      kind = "float";
      break;
    case Code::Bfloat:
      kind = "bfloat";
      break;
    case Code::Complex:
      kind = "complex";
      break;
    case Code::Bool:
      kind = "bool";
      break;
    default:  // newer DLPack codes (float8, ...): none is a count or a weight
      break;
  }
  return fmt::format("{}{}", kind, dtype.bits);
}

std::string shape_string(const AnyArray& a) {
  std::string out = "[";
  for (size_t d = 0; d < a.ndim(); ++d) out += fmt::format("{}{}", d ? ", " : "", a.shape(d));
  return out + "]";
}

void check_ndim(const AnyArray& a, size_t ndim, std::string_view name, std::string_view dims) {
  ISER_CHECK(a.ndim() == ndim, "{}: expected a {}-D array {}, got shape {}", name, ndim, dims,
             shape_string(a));
}

namespace {

template <class Int>
void read_integers(const AnyArray& a, std::string_view name, std::span<Int> out) {
  const size_t n = a.size();
  ISER_CHECK(out.size() == n, "{}: {} elements, expected {}", name, n, out.size());
  const auto code = static_cast<nb::dlpack::dtype_code>(a.dtype().code);
  ISER_CHECK(code == nb::dlpack::dtype_code::Int || code == nb::dlpack::dtype_code::UInt,
             "{}: dtype {} is not an integer type (expected int32 or int64)", name,
             dtype_name(a.dtype()));
  const bool row_major = is_row_major(a);
  if (a.dtype() == nb::dtype<Int>() && row_major) {
    if (n > 0) std::memcpy(out.data(), a.data(), n * sizeof(Int));
    return;
  }
  visit_real(a, name, [&](const auto* data) {
    using T = std::remove_cvref_t<decltype(*data)>;
    if constexpr (std::is_integral_v<T>) {
      for (size_t i = 0; i < n; ++i) {
        const T v = data[row_major ? static_cast<int64_t>(i) : element_offset(a, i)];
        ISER_CHECK(std::in_range<Int>(v), "{}{} = {} does not fit in {} bits", name,
                   index_string(a, i), v, 8 * sizeof(Int));
        out[i] = static_cast<Int>(v);
      }
    }
  });
}

}  // namespace

void read_int32(const AnyArray& a, std::string_view name, std::span<int32_t> out) {
  read_integers<int32_t>(a, name, out);
}

std::vector<int32_t> read_int32(const AnyArray& a, std::string_view name) {
  std::vector<int32_t> out(a.size());
  read_integers<int32_t>(a, name, std::span<int32_t>(out));
  return out;
}

std::vector<int64_t> read_int64(const AnyArray& a, std::string_view name) {
  std::vector<int64_t> out(a.size());
  read_integers<int64_t>(a, name, std::span<int64_t>(out));
  return out;
}

std::vector<double> read_double(const AnyArray& a, std::string_view name) {
  const size_t n = a.size();
  std::vector<double> out(n);
  const bool row_major = is_row_major(a);
  visit_real(a, name, [&](const auto* data) {
    for (size_t i = 0; i < n; ++i) {
      out[i] =
          static_cast<double>(data[row_major ? static_cast<int64_t>(i) : element_offset(a, i)]);
    }
  });
  return out;
}

}  // namespace iser::python

namespace iser::python {

AnyArray as_array(nb::handle obj, std::string_view name) {
  AnyArray out;
  if (nb::try_cast(obj, out)) return out;
  nb::object converted;
  try {
    converted = nb::module_::import_("numpy").attr("asarray")(obj);
  } catch (const nb::python_error& e) {
    throw Error(fmt::format("{}: not an array ({})", name, e.what()));
  }
  ISER_CHECK(nb::try_cast(converted, out), "{}: not an array of numbers (got {})", name,
             nb::type_name(obj.type()).c_str());
  return out;
}

nb::object json_loads(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

}  // namespace iser::python
