// NumPy (and any DLPack CPU array: torch, JAX) in and out of iser._core: integer and real arrays
// of any dtype and strides read into flat row-major vectors, vectors handed to NumPy without a
// copy.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "iser/error.h"

namespace iser::python {

namespace nb = nanobind;

// Any array on the CPU, any dtype, any strides; read-only.
using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;

// "int64", "float32", ... for messages.
std::string dtype_name(nb::dlpack::dtype dtype);

// Shape as "[2, 3]" for messages.
std::string shape_string(const AnyArray& a);

// Checks that `a` has `ndim` dimensions; `dims` names them for the message ("[P, E]").
void check_ndim(const AnyArray& a, size_t ndim, std::string_view name, std::string_view dims);

// The elements of an int32/int64 array (other integer widths too) as int32, row-major. Values
// outside int32 throw naming the index; floats, bools and complex throw naming the dtype.
std::vector<int32_t> read_int32(const AnyArray& a, std::string_view name);
// The same into `out`, which must hold a.size() elements (no allocation).
void read_int32(const AnyArray& a, std::string_view name, std::span<int32_t> out);

// The elements of an integer array as int64, row-major (uint64 values past int64 throw).
std::vector<int64_t> read_int64(const AnyArray& a, std::string_view name);

// The elements of any real or integer array as double, row-major.
std::vector<double> read_double(const AnyArray& a, std::string_view name);

// A NumPy array owning `values` (moved, no copy) with the given shape.
template <class T>
nb::object to_numpy(std::vector<T>&& values, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(owned->data(), shape, owner));
}

template <class T>
nb::object to_numpy(const std::vector<T>& values, std::initializer_list<size_t> shape) {
  return to_numpy(std::vector<T>(values), shape);
}

}  // namespace iser::python

namespace iser::python {

// `obj` as an array: NumPy/DLPack arrays as they are, anything else through numpy.asarray.
// Throws iser::Error naming `name` when it cannot be an array.
AnyArray as_array(nb::handle obj, std::string_view name);

// json.loads(text): the exact values the CLI's JSON holds.
nb::object json_loads(const std::string& text);

}  // namespace iser::python
