// Internal (ops/cuda only). Scalar math shared by the elementwise CUDA kernels, written to
// follow the CPU backend's formulas (ops/cpu/elementwise.cpp) term by term, so both backends
// agree to rounding. `C` is the arithmetic type: float (also for __half and __nv_bfloat16),
// double, or an integer type.
#pragma once

#include <cuda/std/limits>

#include <type_traits>

namespace nabla::ops::cuda::math {

inline constexpr double kSqrt1_2 = 0.70710678118654752440;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename C>
inline constexpr bool kIsFloat = std::is_floating_point_v<C>;

// The float overloads call the single-precision functions explicitly (never the double ones).
template <typename C>
__device__ __forceinline__ C exp(C x) {
  if constexpr (std::is_same_v<C, float>)
    return ::expf(x);
  else
    return ::exp(x);
}
template <typename C>
__device__ __forceinline__ C log(C x) {
  if constexpr (std::is_same_v<C, float>)
    return ::logf(x);
  else
    return ::log(x);
}
template <typename C>
__device__ __forceinline__ C sqrt(C x) {
  if constexpr (std::is_same_v<C, float>)
    return ::sqrtf(x);
  else
    return ::sqrt(x);
}
template <typename C>
__device__ __forceinline__ C tanh(C x) {
  if constexpr (std::is_same_v<C, float>)
    return ::tanhf(x);
  else
    return ::tanh(x);
}
template <typename C>
__device__ __forceinline__ C erf(C x) {
  if constexpr (std::is_same_v<C, float>)
    return ::erff(x);
  else
    return ::erf(x);
}
template <typename C>
__device__ __forceinline__ C pow(C x, C y) {
  if constexpr (std::is_same_v<C, float>)
    return ::powf(x, y);
  else
    return ::pow(x, y);
}
template <typename C>
__device__ __forceinline__ bool isnan(C x) {
  if constexpr (kIsFloat<C>)
    return x != x;
  else
    return false;
}
template <typename C>
__device__ __forceinline__ C quiet_nan() {
  return ::cuda::std::numeric_limits<C>::quiet_NaN();
}

template <typename C>
__device__ __forceinline__ C sigmoid(C x) {
  return C(1) / (C(1) + exp(-x));
}

template <typename C>
__device__ __forceinline__ C gelu_tanh(C x) {
  C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
  return C(0.5) * x * (C(1) + tanh(inner));
}

}  // namespace nabla::ops::cuda::math
