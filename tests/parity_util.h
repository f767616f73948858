// Helpers for the CUDA parity suites: the same op on the CPU and on CUDA, from the same inputs,
// in the same layouts, compared with per-dtype tolerances. The CPU backend is the reference.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace nabla::testing {

// Plain float32 for a scope: TF32 off in cuBLAS and cuDNN (the other routes kept), restored
// afterwards, so float32 results can be compared with tight tolerances.
inline Routes fp32_exact_routes() {
  Routes r = routes();
  r.conv_tf32 = false;
  r.matmul_tf32 = false;
  return r;
}
struct Fp32Exact {
  RoutesGuard guard{fp32_exact_routes()};
};

#define SKIP_WITHOUT_GPU() \
  if (!::nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

inline const std::vector<DType> kAllDTypes = {kFloat32, kFloat64, kFloat16, kBFloat16,
                                              kInt64,   kInt32,   kUInt8,   kBool};
inline const std::vector<DType> kFloatDTypes = {kFloat32, kFloat64, kFloat16, kBFloat16};
inline const std::vector<DType> kNumericDTypes = {kFloat32, kFloat64, kFloat16, kBFloat16,
                                                  kInt64,   kInt32,   kUInt8};

struct Tolerance {
  double rtol;
  double atol;
};

// CPU and CUDA compute floats in the same precision with the same formulas; they differ only
// by the libm/CUDA math ulps and FMA contraction, which can move a 16-bit result by one ulp.
inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return {1e-12, 1e-12};
    case kFloat32:
      return {2e-6, 1e-6};
    case kFloat16:
      return {1e-3, 1e-3};
    case kBFloat16:
      return {1e-2, 1e-2};
    default:
      return {0, 0};  // integers and bool: exact
  }
}

inline Tensor to_cuda(const Tensor& t) {
  return t.to(Device::cuda());
}

// Seeded random values in `dtype` that every op in the suites is defined on: floats in
// +-[0.1, 2] (or [0.1, 2] when positive), signed integers in [-20, 20], uint8 in [1, 20],
// bool about half true.
inline Tensor random_values(const Shape& sizes, uint64_t seed, DType dtype, bool positive = false) {
  Tensor x = random_input(sizes, seed, kFloat64);
  if (positive || dtype == kUInt8) x = abs(x);
  if (dtype == kBool) return gt(x, 0.0);
  if (is_integral(dtype)) return (x * 10.0).to(dtype);
  return x.to(dtype);
}

// A view of a CPU tensor and the same view of its CUDA copy. Every layout gives logical shape
// (2, 3, 4, 5); `storage` is the shape of the tensor the view is taken from.
struct Layout {
  const char* name;
  Shape storage;
  std::function<Tensor(const Tensor&)> view;
};

inline std::vector<Layout> layouts_2345() {
  return {
      {"contiguous", {2, 3, 4, 5}, [](const Tensor& t) { return t; }},
      {"permuted",
       {5, 3, 4, 2},
       [](const Tensor& t) {
         return t.permute({3, 1, 2, 0});
       }},
      {"sliced", {4, 3, 9, 5}, [](const Tensor& t) { return t.slice(0, 0, 4, 2).narrow(2, 2, 4); }},
      {"channels_last",
       {2, 4, 5, 3},
       [](const Tensor& t) {
         return t.permute({0, 3, 1, 2});
       }},
      {"broadcast",
       {1, 3, 1, 5},
       [](const Tensor& t) {
         return t.expand({2, 3, 4, 5});
       }},
      {"unaligned",
       {121},
       [](const Tensor& t) {
         return t.narrow(0, 1, 120).view({2, 3, 4, 5});
       }},
  };
}

// The CPU input for a layout and its CUDA twin (same values, same strides).
struct Pair {
  Tensor cpu;
  Tensor cuda;
};

inline Pair make_pair(const Layout& layout, uint64_t seed, DType dtype, bool positive = false) {
  Tensor base = random_values(layout.storage, seed, dtype, positive);
  return {layout.view(base), layout.view(to_cuda(base))};
}

// CUDA result against the CPU result: same shape, dtype and device, values within tolerance.
inline ::testing::AssertionResult matches_cpu(const Tensor& cuda_result, const Tensor& cpu_result,
                                              std::optional<Tolerance> tol = std::nullopt) {
  if (!cuda_result.is_cuda()) return ::testing::AssertionFailure() << "result is not on CUDA";
  if (cuda_result.dtype() != cpu_result.dtype()) {
    return ::testing::AssertionFailure()
           << "dtype " << dtype_name(cuda_result.dtype()) << " != CPU's " << dtype_name(cpu_result.dtype());
  }
  Tolerance t = tol.value_or(tolerance_for(cpu_result.dtype()));
  return all_close(cuda_result.cpu(), cpu_result, t.rtol, t.atol);
}

inline std::string context(const char* what, DType dtype, const char* layout = "") {
  return std::string(what) + " " + std::string(dtype_name(dtype)) + " " + layout;
}

}  // namespace nabla::testing
