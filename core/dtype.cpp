#include "nabla/core/dtype.h"

#include <algorithm>
#include <array>

namespace nabla {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

std::string_view type_set_name(TypeSet set) {
  switch (set) {
    case TypeSet::All:
      return "any dtype";
    case TypeSet::Floating:
      return "a floating dtype: float32, float64, float16 or bfloat16";
    case TypeSet::FloatingAndIntegral:
      return "a numeric dtype (not bool)";
    case TypeSet::Integral:
      return "an integer or bool dtype";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr std::array<Alias, 15> kAliases{{{"float32", kFloat32},
                                                   {"float", kFloat32},
                                                   {"fp32", kFloat32},
                                                   {"float64", kFloat64},
                                                   {"double", kFloat64},
                                                   {"float16", kFloat16},
                                                   {"half", kFloat16},
                                                   {"fp16", kFloat16},
                                                   {"bfloat16", kBFloat16},
                                                   {"bf16", kBFloat16},
                                                   {"int64", kInt64},
                                                   {"long", kInt64},
                                                   {"int32", kInt32},
                                                   {"uint8", kUInt8},
                                                   {"bool", kBool}}};
  for (const auto& a : kAliases) {
    if (a.name == name) return a.dtype;
  }
  NABLA_CHECK(
      false, "unknown dtype '{}' (expected float32, float64, float16, bfloat16, int64, int32, uint8 or bool)",
      name);
  return kFloat32;
}

namespace {
// Rank within a category; a higher rank wins.
int float_rank(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16:
      return 1;
    case DType::Float32:
      return 2;
    case DType::Float64:
      return 3;
    default:
      return 0;
  }
}
int int_rank(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::UInt8:
      return 1;
    case DType::Int32:
      return 2;
    case DType::Int64:
      return 3;
    default:
      return -1;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (is_reduced_float(a) && is_reduced_float(b)) return kFloat32;  // float16 + bfloat16
    return float_rank(a) >= float_rank(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integral or bool. uint8 with int32/int64 fits in the signed type.
  return int_rank(a) >= int_rank(b) ? a : b;
}

}  // namespace nabla
