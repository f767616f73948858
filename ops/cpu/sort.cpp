// CPU sort and cumulative sum over the rows of contiguous (rows, n) matrices, one row per thread.
// The sort is std::stable_sort of the indices under an order that puts NaN above every number,
// so ties keep their order as CUB's radix sort keeps them on CUDA.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/cpu/sort_kernels.h"

namespace nabla::ops::cpu {

namespace {

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<compute_t<T>>) {
    return std::isnan(static_cast<compute_t<T>>(v));
  } else {
    return false;
  }
}

// a before b in ascending order, NaN last.
template <typename T>
bool ascending(T a, T b) {
  if (is_nan(a)) return false;
  if (is_nan(b)) return true;
  return static_cast<compute_t<T>>(a) < static_cast<compute_t<T>>(b);
}

}  // namespace

void sort_rows(const Tensor& x, bool descending, const Tensor& values, const Tensor& indices) {
  const int64_t rows = x.size(0), n = x.size(1);
  dispatch<TypeSet::All>(x.dtype(), "sort", [&]<typename T>() {
    const T* in = x.data_ptr<T>();
    T* out = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
#pragma omp parallel for if (rows * n > kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = in + r * n;
      int64_t* order = idx + r * n;
      std::iota(order, order + n, int64_t{0});
      if (descending) {
        std::stable_sort(order, order + n, [&](int64_t a, int64_t b) { return ascending(row[b], row[a]); });
      } else {
        std::stable_sort(order, order + n, [&](int64_t a, int64_t b) { return ascending(row[a], row[b]); });
      }
      for (int64_t j = 0; j < n; ++j) out[r * n + j] = row[order[j]];
    }
  });
}

void cumsum_rows(const Tensor& x, bool reverse, const Tensor& out) {
  const int64_t rows = x.size(0), n = x.size(1);
  dispatch<TypeSet::All>(x.dtype(), "cumsum", [&]<typename T>() {
    // Integers and bool add in int64 (out is int64); floats in double, rounded once per element.
    using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;
    using Out = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, int64_t>;
    const T* in = x.data_ptr<T>();
    Out* o = out.data_ptr<Out>();
#pragma omp parallel for if (rows * n > kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      Acc sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t j = reverse ? n - 1 - k : k;
        sum += static_cast<Acc>(static_cast<compute_t<T>>(in[r * n + j]));
        o[r * n + j] = static_cast<Out>(sum);
      }
    }
  });
}

}  // namespace nabla::ops::cpu
