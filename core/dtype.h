// Public header. DType: the runtime element type of a tensor, promotion rules and dispatch.
//
// The element type is a runtime value (AMP keeps float32 and float16 side by side). Kernels
// turn it into a C++ type in one place with dispatch(), a templated lambda:
//   dispatch(t.dtype(), [&]<typename T>() { fill<T>(t, value); });
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "nabla/core/error.h"
#include "nabla/core/half.h"

namespace nabla {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int64, Int32, UInt8, Bool };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt = DType::Int32;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kBool = DType::Bool;
inline constexpr int kNumDTypes = 8;

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64:
      return 8;
    case DType::Float32:
    case DType::Int32:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::UInt8:
    case DType::Bool:
      return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::Int64 || t == DType::Int32 || t == DType::UInt8 || (include_bool && t == DType::Bool);
}
constexpr bool is_reduced_float(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

// "float32", "bfloat16", ... (the names PyTorch and safetensors use, minus the prefix).
std::string_view dtype_name(DType t);
// Parses the names above plus the aliases float, double, half, long, int; throws on others.
DType parse_dtype(std::string_view name);

// Type promotion, as in PyTorch: bool < integers < floating; within a category the wider type
// wins; float16 with bfloat16 gives float32; uint8 with a signed integer gives the signed one
// widened to hold both.
DType promote_types(DType a, DType b);

// The type that accumulates results for `t`: float for float16/bfloat16, double for float64,
// int64 for integers.
constexpr DType accumulate_type(DType t) {
  if (t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32) return DType::Float32;
  if (t == DType::Float64) return DType::Float64;
  return DType::Int64;
}

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// The C++ type arithmetic runs in for storage type T on the CPU.
template <typename T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<Half> {
  using type = float;
};
template <>
struct compute_type<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename compute_type<T>::type;

// Calls fn.template operator()<T>() for the C++ type of `t`. The lambda decides which types it
// supports through the `Types` filter below: an unsupported dtype throws a clear error naming
// `op` and the dtype.
enum class TypeSet : uint8_t { All, Floating, FloatingAndIntegral, Integral };

constexpr bool type_in_set(DType t, TypeSet set) {
  switch (set) {
    case TypeSet::All:
      return true;
    case TypeSet::Floating:
      return is_floating(t);
    case TypeSet::FloatingAndIntegral:
      return t != DType::Bool;
    case TypeSet::Integral:
      return is_integral(t, true);
  }
  return false;
}

std::string_view type_set_name(TypeSet set);

template <TypeSet Set = TypeSet::All, typename Fn>
decltype(auto) dispatch(DType t, const char* op, Fn&& fn) {
  NABLA_CHECK(type_in_set(t, Set), "{}: dtype {} is not supported (expected {})", op, dtype_name(t),
              type_set_name(Set));
  switch (t) {
    case DType::Float32:
      if constexpr (type_in_set(DType::Float32, Set)) return fn.template operator()<float>();
      break;
    case DType::Float64:
      if constexpr (type_in_set(DType::Float64, Set)) return fn.template operator()<double>();
      break;
    case DType::Float16:
      if constexpr (type_in_set(DType::Float16, Set)) return fn.template operator()<Half>();
      break;
    case DType::BFloat16:
      if constexpr (type_in_set(DType::BFloat16, Set)) return fn.template operator()<BFloat16>();
      break;
    case DType::Int64:
      if constexpr (type_in_set(DType::Int64, Set)) return fn.template operator()<int64_t>();
      break;
    case DType::Int32:
      if constexpr (type_in_set(DType::Int32, Set)) return fn.template operator()<int32_t>();
      break;
    case DType::UInt8:
      if constexpr (type_in_set(DType::UInt8, Set)) return fn.template operator()<uint8_t>();
      break;
    case DType::Bool:
      if constexpr (type_in_set(DType::Bool, Set)) return fn.template operator()<bool>();
      break;
  }
  NABLA_ASSERT(false, "unreachable dtype in dispatch for {}", op);
  __builtin_unreachable();
}

}  // namespace nabla
