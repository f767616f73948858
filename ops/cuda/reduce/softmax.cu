// CUDA softmax and log_softmax along one dim.
//
// The input is read in place as the dense (O, R, I) block of Note [Reduction layout]
// (reduce/layout.h). Each line of R elements needs its max and its sum of exp(x - max); both
// come from one read with the online update (a running max, and a sum rescaled whenever the max
// grows), then a second read writes the outputs. Two ways to run it:
//  - rows (I == 1, the contiguous last dim, enough lines to fill the GPU): one kernel, with a
//    warp, a sub-warp for short rows, or a 512-thread block for rows longer than 1024 per line;
//  - otherwise (strided dims; a few very long rows): the statistics are a reduction like any
//    other (reduce/launch.cuh: coalesced columns, long lines split over blocks), then an
//    elementwise kernel writes the outputs from them.
// float16/bfloat16 compute in float and round once on store, as on the CPU. A NaN anywhere in a
// line makes the whole line NaN, as does a +inf (exp(inf - inf)), matching the CPU kernel.
#include <cmath>

#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/cuda/reduce/kernels.h"
#include "nabla/ops/cuda/reduce/launch.cuh"
#include "nabla/ops/detail/elementwise_formulas.h"

namespace nabla::ops::cuda {

namespace {

// The running max and the sum of exp(x - max) of the values seen so far.
template <typename C>
struct MaxSum {
  C max;
  C sum;
};

template <typename C>
__device__ __forceinline__ MaxSum<C> empty_max_sum() {
  return {C(-INFINITY), C(0)};
}

template <typename C>
__device__ __forceinline__ void add_value(MaxSum<C>& a, C v) {
  if (v > a.max) {
    a.sum = a.sum * formula::exp(a.max - v) + C(1);  // exp(-inf) = 0 for the first value
    a.max = v;
  } else if (v != C(-INFINITY)) {  // -inf adds nothing (and -inf - -inf would be NaN); NaN poisons the sum
    a.sum += formula::exp(v - a.max);
  }
}

template <typename C>
__device__ __forceinline__ MaxSum<C> merge(const MaxSum<C>& a, const MaxSum<C>& b) {
  const C m = b.max > a.max ? b.max : a.max;
  // A zero sum has seen nothing (or only -inf) and may carry max = -inf: it adds nothing.
  const C sa = a.sum == C(0) ? C(0) : a.sum * formula::exp(a.max - m);
  const C sb = b.sum == C(0) ? C(0) : b.sum * formula::exp(b.max - m);
  return {m, sa + sb};
}

template <typename C>
__device__ __forceinline__ MaxSum<C> shfl_xor(MaxSum<C> v, int mask) {
  return {__shfl_xor_sync(0xffffffffu, v.max, mask), __shfl_xor_sync(0xffffffffu, v.sum, mask)};
}

// Writes the outputs of one line: exp(x - max) / sum, or x - (max + log(sum)).
template <typename T>
__device__ __forceinline__ void write_line(const T* __restrict__ x, T* __restrict__ y, int64_t first,
                                           int64_t end, int64_t step, int64_t stride,
                                           MaxSum<opmath_t<T>> total, bool log) {
  using C = opmath_t<T>;
  if (total.max == C(INFINITY)) total.sum = C(NAN);  // the CPU's exp(inf - inf): the line is NaN
  if (log) {
    const C lse = total.max + formula::log(total.sum);
    for (int64_t r = first; r < end; r += step)
      y[r * stride] = store_from<T>(load_as_opmath(x[r * stride]) - lse);
  } else {
    const C inv = C(1) / total.sum;
    for (int64_t r = first; r < end; r += step) {
      y[r * stride] = store_from<T>(formula::exp(load_as_opmath(x[r * stride]) - total.max) * inv);
    }
  }
}

// blockDim (bx, by): bx lanes (a power of two; when > 32, by == 1) per line of R contiguous
// elements, by lines per block.
template <typename T>
__global__ void __launch_bounds__(512)
    softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t lines, int64_t R, bool log) {
  using C = opmath_t<T>;
  const int64_t line = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = line < lines;
  const T* xl = x + line * R;
  MaxSum<C> acc = empty_max_sum<C>();
  if (active) {
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) add_value(acc, load_as_opmath(xl[r]));
  }
  // A butterfly leaves every lane of the group with the line's total.
  for (unsigned mask = min(blockDim.x, 32u) / 2; mask > 0; mask /= 2) acc = merge(acc, shfl_xor(acc, mask));
  if (blockDim.x > 32) {
    __shared__ MaxSum<C> per_warp[16];
    const unsigned warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (threadIdx.x % 32 == 0) per_warp[warp] = acc;
    __syncthreads();
    acc = per_warp[0];
    for (unsigned w = 1; w < warps; ++w) acc = merge(acc, per_warp[w]);
  }
  if (active) write_line(xl, y + line * R, threadIdx.x, R, blockDim.x, 1, acc, log);
}

// The statistics of each line as a reduction op (see reduce/launch.cuh). write() leaves what
// the outputs need: {max, 1 / sum} for softmax, {max + log(sum), 0} for log_softmax.
template <typename T>
struct LineStatsOp {
  using In = T;
  using C = opmath_t<T>;
  using Acc = MaxSum<C>;
  Acc* stats;
  bool log;

  __device__ Acc init() const { return empty_max_sum<C>(); }
  __device__ void update(Acc& a, T v, int64_t) const { add_value(a, load_as_opmath(v)); }
  __device__ Acc combine(const Acc& a, const Acc& b) const { return merge(a, b); }
  __device__ void write(int64_t k, Acc a) const {
    if (a.max == C(INFINITY)) a.sum = C(NAN);
    stats[k] = log ? Acc{a.max + formula::log(a.sum), C(0)} : Acc{a.max, C(1) / a.sum};
  }
};

// y = f(x, stats of its line) over the dense (O, R, I) block; line (o, i) is stats[o * I + i].
template <typename T, typename Index>
__global__ void __launch_bounds__(256) softmax_apply_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                            const MaxSum<opmath_t<T>>* __restrict__ stats,
                                                            Index numel, Index R, Index I, bool log) {
  using C = opmath_t<T>;
  for (Index e = blockIdx.x * Index{blockDim.x} + threadIdx.x; e < numel;
       e += Index{gridDim.x} * blockDim.x) {
    const Index i = e % I, o = e / I / R;
    const MaxSum<C> s = stats[o * I + i];
    const C v = load_as_opmath(x[e]);
    y[e] = store_from<T>(log ? v - s.max : formula::exp(v - s.max) * s.sum);
  }
}

template <typename T>
void softmax_by_reduction(const ReduceLayout& layout, T* y, bool log) {
  using C = opmath_t<T>;
  Tensor stats_buffer = Tensor::empty({layout.outputs() * static_cast<int64_t>(sizeof(MaxSum<C>))},
                                      {.dtype = kUInt8, .device = layout.input.device()});
  auto* stats = static_cast<MaxSum<C>*>(stats_buffer.data_ptr());
  reduction::launch(LineStatsOp<T>{stats, log}, layout);
  const auto* x = static_cast<const T*>(layout.input.data_ptr());
  const int64_t numel = layout.input.numel();
  const cudaStream_t stream = stream_for(layout.input);
  if (numel < (int64_t{1} << 32)) {
    softmax_apply_kernel<T, uint32_t><<<blocks_for(numel, 4), kBlockSize, 0, stream>>>(
        x, y, stats, static_cast<uint32_t>(numel), static_cast<uint32_t>(layout.b),
        static_cast<uint32_t>(layout.i), log);
  } else {
    softmax_apply_kernel<T, uint64_t><<<blocks_for(numel, 4), kBlockSize, 0, stream>>>(
        x, y, stats, static_cast<uint64_t>(numel), static_cast<uint64_t>(layout.b),
        static_cast<uint64_t>(layout.i), log);
  }
  NABLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log) {
  if (x.numel() == 0) return;
  const ReduceLayout layout = plan_softmax_layout(x, dim);
  const Tensor& in = layout.input;
  const Tensor y = softmax_buffer(layout, out);
  const int64_t lines = layout.outputs(), R = layout.b, I = layout.i;
  const cudaStream_t stream = stream_for(x);
  dispatch_device<TypeSet::Floating>(x.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    const auto* xp = static_cast<const T*>(in.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    if (I == 1 && (lines >= sm_count(x.device().index) * 4 || R <= 8192)) {
      dim3 block;
      if (R <= 1024) {
        block.x = reduction::pow2_at_least(R, 32);
        block.y = 256 / block.x;
      } else {
        block.x = 512;
        block.y = 1;
      }
      const int64_t blocks = (lines + block.y - 1) / block.y;
      NABLA_ASSERT(blocks < (int64_t{1} << 31), "softmax grid of {} blocks", blocks);
      softmax_rows_kernel<<<static_cast<unsigned>(blocks), block, 0, stream>>>(xp, yp, lines, R, log);
      NABLA_CUDA_CHECK_LAUNCH();
    } else {
      softmax_by_reduction<T>(layout, yp, log);
    }
  });
  finish_softmax(y, out);
}

}  // namespace nabla::ops::cuda
