// CUDA sum, mean and var (launchers behind reduce() in reduce/layout.cpp).
//
// Accumulators: float16/bfloat16 and float32 in float, float64 in double, integers and bool in
// int64 (written as int64). The CPU keeps float32 sums in double; here float is enough because
// the tree of partial sums (lanes, warps, splits) keeps each chain short, and it halves the
// register and shuffle traffic. var is Welford per lane, merged with Chan's formula.
#include "nabla/ops/cuda/reduce/launch.cuh"

namespace nabla::ops::cuda {

namespace {

template <typename T>
using sum_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>;

template <typename T, typename Out>
struct SumOp {
  using In = T;
  using Acc = sum_acc_t<T>;
  Out* out;
  Acc divisor;  // 1 for a sum, R for a mean

  __device__ Acc init() const { return Acc(0); }
  __device__ void update(Acc& a, T v, int64_t) const { a += static_cast<Acc>(load_as_opmath(v)); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void write(int64_t k, Acc a) const {
    if constexpr (std::is_integral_v<Acc>) {
      out[k] = static_cast<Out>(a);
    } else {
      out[k] = store_from<Out>(a / divisor);
    }
  }
};

template <typename T>
struct VarOp {
  using In = T;
  using C = opmath_t<T>;
  struct Acc {
    C mean;
    C m2;
    int64_t n;
  };
  T* out;
  int64_t correction;

  __device__ Acc init() const { return {C(0), C(0), 0}; }
  __device__ void update(Acc& a, T v, int64_t) const {
    const C x = load_as_opmath(v);
    a.n += 1;
    const C d = x - a.mean;
    a.mean += d / static_cast<C>(a.n);
    a.m2 += d * (x - a.mean);
  }
  __device__ Acc combine(const Acc& a, const Acc& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const C d = b.mean - a.mean, fb = static_cast<C>(b.n) / static_cast<C>(n);
    return {a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<C>(a.n) * fb, n};
  }
  __device__ void write(int64_t k, const Acc& a) const {
    // N - correction <= 0 divides by zero: inf, or NaN when M2 is 0, as on the CPU.
    const int64_t dof = a.n - correction;
    out[k] = store_from<T>(a.m2 / static_cast<C>(dof > 0 ? dof : 0));
  }
};

}  // namespace

void reduce_sum(const ReduceLayout& layout, const Tensor& out, bool mean) {
  dispatch_device(layout.input.dtype(), mean ? "mean" : "sum", [&]<typename T>() {
    using Out = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
    using Acc = sum_acc_t<T>;
    const auto divisor = static_cast<Acc>(mean ? layout.reduce_size() : 1);
    reduction::launch(SumOp<T, Out>{static_cast<Out*>(out.data_ptr()), divisor}, layout);
  });
}

void reduce_var(const ReduceLayout& layout, const Tensor& out, int64_t correction) {
  dispatch_device<TypeSet::Floating>(layout.input.dtype(), "var", [&]<typename T>() {
    reduction::launch(VarOp<T>{static_cast<T*>(out.data_ptr()), correction}, layout);
  });
}

}  // namespace nabla::ops::cuda
