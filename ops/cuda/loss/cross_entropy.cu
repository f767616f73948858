// CUDA fused cross-entropy: one block per row of (N, C) logits, read in their own dtype and
// computed in float (double for float64), so a 16-bit (N, C) tensor is never copied to float32
// and no log-probabilities are kept; the backward recomputes softmax from the saved per-row
// log-sum-exp. For a GPT-2 batch (16 x 1024 rows of 50304 classes) that saves two float32
// (N, C) tensors, 3.3 GB each.
//
// The forward keeps an online (max, sum of exp) pair per thread, so it reads the row once, and
// combines the pairs across the block. Rows whose length and start allow it are read and written
// 16 bytes at a time (kVec elements), one pair update per vector: with scalar 2-byte loads the
// GPT-2 forward ran at a quarter of the memory bandwidth. Neither kernel reads anything back to the host; a
// target outside [0, C) that is not ignore_index gives a NaN loss and no gradient (as nll_forward).
#include <cmath>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/loss/kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr int kRowThreads = 512;

// Online log-sum-exp state: the largest value seen and the sum of exp(v - max).
template <typename A>
struct MaxSum {
  A max;
  A sum;
};

template <typename A>
__device__ __forceinline__ MaxSum<A> combine(MaxSum<A> a, MaxSum<A> b) {
  if (a.max < b.max) {
    const MaxSum<A> t = a;
    a = b;
    b = t;
  }
  // a.max >= b.max, or one is NaN: NaN must reach the result. An empty side (max -inf) adds nothing.
  if (isnan(b.max)) return b;
  if (b.max == -INFINITY) return a;
  return {a.max, a.sum + b.sum * exp(b.max - a.max)};
}

// The (max, sum of exp) pair of kVec values, NaN if any is NaN.
template <typename A, int kVec>
__device__ __forceinline__ MaxSum<A> pair_of(const A (&v)[kVec]) {
  A m = v[0];
  bool nan = false;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    nan = nan || isnan(v[j]);
    m = v[j] > m ? v[j] : m;
  }
  if (nan) return {A(NAN), A(1)};
  if (m == -INFINITY) return {m, A(0)};  // all -inf: adds nothing
  A sum = A(0);
#pragma unroll
  for (int j = 0; j < kVec; ++j) sum += exp(v[j] - m);
  return {m, sum};
}

// Row pointers are 16-byte aligned and C a multiple of kVec when kVec > 1 (see vector_width).
template <typename T, int kVec>
__global__ void __launch_bounds__(kRowThreads)
    forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                   opmath_t<T>* __restrict__ loss, opmath_t<T>* __restrict__ lse, int64_t C,
                   int64_t ignore_index, double smoothing) {
  using A = opmath_t<T>;
  const int64_t n = blockIdx.x;
  const T* row = logits + n * C;
  MaxSum<A> state{A(-INFINITY), A(0)};
  A total = A(0);
  for (int64_t c = int64_t{threadIdx.x} * kVec; c < C; c += int64_t{blockDim.x} * kVec) {
    const auto packed = load_vector<Aligned<T, kVec>>(row + c);
    A v[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      v[j] = load_as_opmath(packed.v[j]);
      total += v[j];
    }
    state = combine(state, pair_of<A, kVec>(v));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum<A> other{__shfl_down_sync(0xffffffffu, state.max, offset),
                          __shfl_down_sync(0xffffffffu, state.sum, offset)};
    state = combine(state, other);
    total += __shfl_down_sync(0xffffffffu, total, offset);
  }
  __shared__ MaxSum<A> warp_state[kRowThreads / 32];
  __shared__ A warp_total[kRowThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_state[warp] = state;
    warp_total[warp] = total;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
    state = combine(state, warp_state[w]);
    total += warp_total[w];
  }
  const A l = state.max + log(state.sum);
  lse[n] = l;
  const int64_t t = target[n];
  A out = A(0);
  if (t != ignore_index) {
    // The smoothing term only when smoothing is on: with a -inf logit the class mean is -inf.
    out = (t >= 0 && t < C) ? l - load_as_opmath(row[t]) : A(NAN);
    if (smoothing > 0) out = (A(1) - A(smoothing)) * out + A(smoothing) * (l - total / static_cast<A>(C));
  }
  loss[n] = out;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kRowThreads)
    backward_kernel(const opmath_t<T>* __restrict__ grad, const T* logits, const int64_t* __restrict__ target,
                    const opmath_t<T>* __restrict__ lse, T* grad_logits, int64_t C, int64_t ignore_index,
                    double smoothing) {
  // logits and grad_logits may be one buffer (Note [Gradient over the logits] in ops/loss.cpp):
  // each thread reads a vector and then writes the same elements, and neither is __restrict__.
  using A = opmath_t<T>;
  const int64_t n = blockIdx.x;
  const int64_t t = target[n];
  const bool kept = t != ignore_index && t >= 0 && t < C;
  const A g = kept ? grad[n] : A(0), l = lse[n];
  const A uniform = A(smoothing) / static_cast<A>(C), hit = A(1) - A(smoothing);
  const T* row = logits + n * C;
  T* out = grad_logits + n * C;
  for (int64_t c = int64_t{threadIdx.x} * kVec; c < C; c += int64_t{blockDim.x} * kVec) {
    const auto packed = load_vector<Aligned<T, kVec>>(row + c);
    Aligned<T, kVec> result;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const A p = exp(load_as_opmath(packed.v[j]) - l);
      result.v[j] = store_from<T>(g * (p - uniform - (c + j == t ? hit : A(0))));
    }
    store_vector(out + c, result);
  }
}

// 16 bytes of T per step when every row starts 16-byte aligned, else 1.
template <typename T>
int vector_width(const void* data, const void* other, int64_t C) {
  constexpr int kWide = 16 / sizeof(T);
  const bool aligned =
      reinterpret_cast<uintptr_t>(data) % 16 == 0 && reinterpret_cast<uintptr_t>(other) % 16 == 0;
  return kWide > 1 && aligned && C % kWide == 0 ? kWide : 1;
}

unsigned row_grid(int64_t rows) {
  NABLA_CHECK(rows < (int64_t{1} << 31), "cross_entropy: {} rows are more than one launch takes (2^31 - 1)",
              rows);
  return static_cast<unsigned>(rows);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           double label_smoothing, const Tensor& loss, const Tensor& lse) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  DeviceScope device(logits.device().index);
  dispatch_device<TypeSet::Floating>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    using A = opmath_t<T>;
    constexpr int kWide = 16 / sizeof(T) > 1 ? 16 / sizeof(T) : 1;
    const auto launch = [&](auto kernel) {
      kernel<<<row_grid(N), kRowThreads, 0, stream_for(logits)>>>(
          static_cast<const T*>(logits.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
          static_cast<A*>(loss.data_ptr()), static_cast<A*>(lse.data_ptr()), C, ignore_index,
          label_smoothing);
      NABLA_CUDA_CHECK_LAUNCH();
    };
    if (vector_width<T>(logits.data_ptr(), logits.data_ptr(), C) > 1) {
      launch(forward_kernel<T, kWide>);
    } else {
      launch(forward_kernel<T, 1>);
    }
  });
}

void cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, const Tensor& lse,
                            int64_t ignore_index, double label_smoothing, const Tensor& grad_logits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  DeviceScope device(logits.device().index);
  dispatch_device<TypeSet::Floating>(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    constexpr int kWide = 16 / sizeof(T) > 1 ? 16 / sizeof(T) : 1;
    const auto launch = [&](auto kernel) {
      kernel<<<row_grid(N), kRowThreads, 0, stream_for(logits)>>>(
          static_cast<const A*>(grad.data_ptr()), static_cast<const T*>(logits.data_ptr()),
          static_cast<const int64_t*>(target.data_ptr()), static_cast<const A*>(lse.data_ptr()),
          static_cast<T*>(grad_logits.data_ptr()), C, ignore_index, label_smoothing);
      NABLA_CUDA_CHECK_LAUNCH();
    };
    if (vector_width<T>(logits.data_ptr(), grad_logits.data_ptr(), C) > 1) {
      launch(backward_kernel<T, kWide>);
    } else {
      launch(backward_kernel<T, 1>);
    }
  });
}

}  // namespace nabla::ops::cuda
