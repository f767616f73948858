// CUDA p-norms (launcher behind reduce() in reduce/layout.cpp): p = 0 counts non-zeros, 1 and 2
// sum |x| and x^2, +-inf take the max/min of |x| (NaN wins), any other p sums |x|^p and takes
// the 1/p-th power. Accumulates in float (double for float64).
#include <cmath>

#include "nabla/ops/cuda/reduce/launch.cuh"
#include "nabla/ops/detail/elementwise_formulas.h"

namespace nabla::ops::cuda {

namespace {

enum class NormKind { Zero, One, Two, Inf, NegInf, General };

template <typename T, NormKind K>
struct NormOp {
  using In = T;
  using Acc = opmath_t<T>;
  T* out;
  Acc p;

  __device__ Acc init() const { return K == NormKind::NegInf ? Acc(INFINITY) : Acc(0); }
  __device__ void update(Acc& a, T x, int64_t) const {
    const Acc v = formula::abs(load_as_opmath(x));
    if constexpr (K == NormKind::Zero) a += v != Acc(0);  // NaN counts as non-zero
    if constexpr (K == NormKind::One) a += v;
    if constexpr (K == NormKind::Two) a += v * v;
    if constexpr (K == NormKind::Inf) a = (v > a || v != v) ? v : a;
    if constexpr (K == NormKind::NegInf) a = (v < a || v != v) ? v : a;
    if constexpr (K == NormKind::General) a += formula::pow(v, p);
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (K == NormKind::Inf) return (b > a || b != b) ? b : a;
    if constexpr (K == NormKind::NegInf) return (b < a || b != b) ? b : a;
    return a + b;
  }
  __device__ void write(int64_t k, Acc a) const {
    if constexpr (K == NormKind::Two) a = formula::sqrt(a);
    if constexpr (K == NormKind::General) a = formula::pow(a, Acc(1) / p);
    out[k] = store_from<T>(a);
  }
};

template <typename T>
void launch_norm(const ReduceLayout& layout, T* out, double p) {
  using Acc = opmath_t<T>;
  const Acc pa = static_cast<Acc>(p);
  if (p == 0) return reduction::launch(NormOp<T, NormKind::Zero>{out, pa}, layout);
  if (p == 1) return reduction::launch(NormOp<T, NormKind::One>{out, pa}, layout);
  if (p == 2) return reduction::launch(NormOp<T, NormKind::Two>{out, pa}, layout);
  if (std::isinf(p) && p > 0) return reduction::launch(NormOp<T, NormKind::Inf>{out, pa}, layout);
  if (std::isinf(p)) return reduction::launch(NormOp<T, NormKind::NegInf>{out, pa}, layout);
  reduction::launch(NormOp<T, NormKind::General>{out, pa}, layout);
}

}  // namespace

void reduce_norm(const ReduceLayout& layout, const Tensor& out, double p) {
  dispatch_device<TypeSet::Floating>(layout.input.dtype(), "norm", [&]<typename T>() {
    launch_norm<T>(layout, static_cast<T*>(out.data_ptr()), p);
  });
}

}  // namespace nabla::ops::cuda
