// The CPU backend of the rotary-embedding seam (ops/detail/rotary.h): a loop over rows, OpenMP
// across rows when the tensor is big enough (cpu/loops.h's grain).
#include <omp.h>

#include <type_traits>

#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/detail/rotary.h"

namespace nabla::ops::cpu {

namespace {

template <typename T>
void rotate_rows(const RotaryCall& c) {
  using C = compute_t<T>;
  using Table = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Tensor& x = c.x;
  const int64_t dims = x.dim(), D = x.size(-1), half = D / 2, rows = x.numel() / D;
  const T* in = static_cast<const T*>(x.data_ptr());
  T* out = static_cast<T*>(c.out.data_ptr());
  const auto* cos = static_cast<const Table*>(c.cos.data_ptr());
  const auto* sin = static_cast<const Table*>(c.sin.data_ptr());
  const int64_t xs = x.stride(-1), os = c.out.stride(-1);
  const C sign = c.inverse ? C(-1) : C(1);
  const bool parallel = x.numel() >= kParallelGrain && !omp_in_parallel();
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    // The row's coordinates over dims 0 .. dims - 2, innermost (the position) first.
    int64_t rest = row, x_at = 0, out_at = 0, t = 0;
    for (int64_t d = dims - 2; d >= 0; --d) {
      const int64_t i = rest % x.size(d);
      rest /= x.size(d);
      if (d == dims - 2) t = i;
      x_at += i * x.stride(d);
      out_at += i * c.out.stride(d);
    }
    const Table* cos_row = cos + (c.offset + t) * half;
    const Table* sin_row = sin + (c.offset + t) * half;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t ia = c.interleaved ? 2 * i : i, ib = c.interleaved ? 2 * i + 1 : i + half;
      C ya, yb;
      rotate_pair<C>(static_cast<C>(in[x_at + ia * xs]), static_cast<C>(in[x_at + ib * xs]),
                     static_cast<C>(cos_row[i]), sign * static_cast<C>(sin_row[i]), ya, yb);
      out[out_at + ia * os] = static_cast<T>(ya);
      out[out_at + ib * os] = static_cast<T>(yb);
    }
  }
}

void rotate(const RotaryCall& call) {
  dispatch<TypeSet::Floating>(call.x.dtype(), "rotary_embedding",
                              [&]<typename T>() { rotate_rows<T>(call); });
}

}  // namespace

const RotaryKernels kRotaryKernels{.rotate = rotate};

}  // namespace nabla::ops::cpu
