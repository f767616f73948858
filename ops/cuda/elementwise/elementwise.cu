// CUDA unary, binary and where kernels: the formulas of detail/elementwise_formulas.h (Note [One
// formula per op]), the same ones the CPU runs. Each (op, dtype) pair is its own functor instance
// run through launch_elementwise (elementwise/elementwise.cuh), so the op is chosen once on the host and the
// kernel body is straight-line code; math runs in opmath_t (float for float16/bfloat16) and
// rounds once on store, as on the CPU.
#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/detail/elementwise_formulas.h"

namespace nabla::ops::cuda {

namespace {

// ---- unary -----------------------------------------------------------------------------------

template <UnaryOp kOp, typename T>
struct UnaryKernel {
  formula::UnaryScalars<opmath_t<T>> s;
  __device__ __forceinline__ T operator()(T raw) const {
    return store_from<T>(formula::unary<kOp>(load_as_opmath(raw), s));
  }
};

template <UnaryOp kOp, typename T>
struct UnaryCompareKernel {
  double a;
  __device__ __forceinline__ bool operator()(T raw) const {
    return formula::compare_scalar<kOp>(static_cast<double>(load_as_opmath(raw)), a);
  }
};

template <typename T>
void unary_typed(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p) {
  using C = opmath_t<T>;
  with_unary_op(op, [&]<UnaryOp kOp>() {
    if constexpr (is_comparison(kOp)) {
      launch_elementwise<bool, T>(out, {&in}, UnaryCompareKernel<kOp, T>{p.a});
    } else if constexpr (is_float_only(kOp) && !formula::kIsFloat<C>) {
      NABLA_ASSERT(false, "unary op {} reached the CUDA kernel with integer dtype {}", name(kOp),
                   dtype_name(in.dtype()));
    } else {
      launch_elementwise<T, T>(out, {&in}, UnaryKernel<kOp, T>{formula::UnaryScalars<C>::from(p)});
    }
  });
}

// ---- binary ----------------------------------------------------------------------------------

template <BinaryOp kOp, typename T>
struct BinaryKernel {
  opmath_t<T> alpha;
  __device__ __forceinline__ T operator()(T ra, T rb) const {
    return store_from<T>(formula::binary<kOp>(load_as_opmath(ra), load_as_opmath(rb), alpha));
  }
};

// float32 `a` with a 16-bit `b` (or the other way round), computed and stored in float32.
template <BinaryOp kOp, typename A, typename B>
struct MixedBinaryKernel {
  float alpha;
  __device__ __forceinline__ float operator()(A ra, B rb) const {
    return formula::binary<kOp>(load_as_opmath(ra), load_as_opmath(rb), alpha);
  }
};

template <BinaryOp kOp, typename T>
struct BinaryCompareKernel {
  __device__ __forceinline__ bool operator()(T ra, T rb) const {
    return formula::compare<kOp>(load_as_opmath(ra), load_as_opmath(rb));
  }
};

template <BinaryOp kOp>
struct LogicalKernel {
  __device__ __forceinline__ bool operator()(bool x, bool y) const { return formula::logical<kOp>(x, y); }
};

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  using C = opmath_t<T>;
  with_binary_op(op, [&]<BinaryOp kOp>() {
    if constexpr (std::is_same_v<T, bool>) {
      if constexpr (is_logical_op(kOp)) {
        launch_elementwise<bool, bool, bool>(out, {&a, &b}, LogicalKernel<kOp>{});
      } else {
        NABLA_ASSERT(false, "binary op {} reached the CUDA kernel with bool inputs", name(kOp));
      }
    } else if constexpr (is_comparison(kOp)) {
      launch_elementwise<bool, T, T>(out, {&a, &b}, BinaryCompareKernel<kOp, T>{});
    } else if constexpr (!formula::kIsFloat<C> && !is_integer_op(kOp)) {
      NABLA_ASSERT(false, "binary op {} reached the CUDA kernel with dtype {}", name(kOp),
                   dtype_name(a.dtype()));
    } else {
      launch_elementwise<T, T, T>(out, {&a, &b}, BinaryKernel<kOp, T>{static_cast<C>(alpha)});
    }
  });
}

// ---- where -----------------------------------------------------------------------------------

template <typename U>
struct Select {
  __device__ __forceinline__ U operator()(bool c, U x, U y) const { return c ? x : y; }
};

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams params) {
  dispatch_device<TypeSet::FloatingAndIntegral>(in.dtype(), "unary op",
                                                [&]<typename T>() { unary_typed<T>(op, in, out, params); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (a.dtype() != b.dtype()) {
    NABLA_ASSERT(is_mixed_float_pair(op, a.dtype(), b.dtype()) && out.dtype() == kFloat32,
                 "binary op {} reached the CUDA kernel with {} and {}", name(op), dtype_name(a.dtype()),
                 dtype_name(b.dtype()));
    const DType half = a.dtype() == kFloat32 ? b.dtype() : a.dtype();
    dispatch_device<TypeSet::Floating>(half, "binary op", [&]<typename H>() {
      if constexpr (std::is_same_v<H, __half> || std::is_same_v<H, __nv_bfloat16>) {
        with_binary_op(op, [&]<BinaryOp kOp>() {
          if constexpr (kOp == BinaryOp::Add || kOp == BinaryOp::Sub || kOp == BinaryOp::Mul) {
            if (a.dtype() == kFloat32) {
              launch_elementwise<float, float, H>(
                  out, {&a, &b}, MixedBinaryKernel<kOp, float, H>{static_cast<float>(alpha)});
            } else {
              launch_elementwise<float, H, float>(
                  out, {&a, &b}, MixedBinaryKernel<kOp, H, float>{static_cast<float>(alpha)});
            }
          }
        });
      }
    });
    return;
  }
  if (a.dtype() == kBool) {
    NABLA_CHECK(is_logical_op(op),
                "binary op on bool tensors: only +, *, maximum, minimum and comparisons are defined");
  }
  dispatch_device(a.dtype(), "binary op", [&]<typename T>() { binary_typed<T>(op, a, b, out, alpha); });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  // Only bits move, so one kernel per element size serves every dtype.
  dispatch_bits(a.itemsize(), [&]<typename U>() {
    launch_elementwise<U, bool, U, U>(out, {&cond, &a, &b}, Select<U>{});
  });
}

}  // namespace nabla::ops::cuda
