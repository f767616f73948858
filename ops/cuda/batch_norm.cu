// nabla's own CUDA batch-norm kernels, for the calls cuDNN does not take (Note [cuDNN batch
// norm] in batch_norm_cudnn.cpp): every contiguous (NCHW) input, where they are faster than
// cuDNN's, bfloat16 eval, very large batches, and anything cuDNN refuses. So they are built for
// bandwidth, not only for correctness.
//
// Statistics and gradient sums take two kernels each: the partial sums of batch_norm_sums.cuh,
// then one warp per channel that adds a channel's partials in a fixed order (deterministic)
// and finishes the statistics. The variance is one pass over x, shifted by the channel's first
// element (a sample of the channel, so the shifted mean is small and E[d^2] - E[d]^2 does not
// cancel even when the mean is far from zero). Elementwise kernels move 8/4/2 elements per load
// where the layout allows and find the channel once per vector. Float16/bfloat16 compute in
// float; the statistics are float (double for float64).
#include "nabla/ops/cuda/batch_norm_sums.cuh"
#include "nabla/ops/cuda/batch_norm_vectors.cuh"
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/norm_kernels.h"

namespace nabla::ops::cuda {

namespace {

using namespace batch_norm_detail;

template <typename T>
__global__ void stats_finalize_kernel(const acc_t<T>* __restrict__ partial, int64_t splits,
                                      const T* __restrict__ x, int64_t channels, int64_t inner, int64_t count,
                                      double eps, double momentum, acc_t<T>* save_mean, acc_t<T>* save_invstd,
                                      acc_t<T>* running_mean, acc_t<T>* running_var) {
  using A = acc_t<T>;
  const int64_t c = warp_channel();
  if (c >= channels) return;  // the whole warp
  A s0, s1;
  warp_total_of(partial, splits, channels, c, s0, s1);
  if (threadIdx.x % 32 != 0) return;
  const A n = static_cast<A>(count);
  const A shifted_mean = s0 / n;
  A var = s1 / n - shifted_mean * shifted_mean;
  var = var > A(0) ? var : A(0);
  const A mean = load_as_acc(x[c * inner]) + shifted_mean;
  save_mean[c] = mean;
  save_invstd[c] = A(1) / sqrt(var + static_cast<A>(eps));
  if (running_mean) {
    const A m = static_cast<A>(momentum);
    running_mean[c] = (A(1) - m) * running_mean[c] + m * mean;
    running_var[c] = (A(1) - m) * running_var[c] + m * var * n / (n - A(1));
  }
}

// sums[c] = sum(dy), sums[C + c] = sum(dy * (x - mean)); the weight and bias gradients follow.
template <typename A>
__global__ void grad_finalize_kernel(const A* __restrict__ partial, int64_t splits, int64_t channels,
                                     const A* __restrict__ invstd, A* __restrict__ sums, A* dweight,
                                     A* dbias) {
  const int64_t c = warp_channel();
  if (c >= channels) return;  // the whole warp
  A s0, s1;
  warp_total_of(partial, splits, channels, c, s0, s1);
  if (threadIdx.x % 32 != 0) return;
  sums[c] = s0;
  sums[channels + c] = s1;
  if (dweight) dweight[c] = s1 * invstd[c];
  if (dbias) dbias[c] = s0;
}

// ---- elementwise -----------------------------------------------------------------------------

// The channel of element e0 and the step between the channels of its vector's elements: the
// same channel for contiguous x, consecutive channels for channels_last.
__device__ __forceinline__ int64_t channel_of(int64_t e0, int64_t channels, int64_t inner) {
  return inner == 1 ? e0 % channels : (e0 / inner) % channels;
}

// y = (x - mean[c]) * invstd[c] * w[c] + b[c]; with `from_var`, `scale` holds variances. The
// fused variants add z and/or apply a ReLU to that.
template <typename T, int V>
__global__ void normalize_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t numel, int64_t channels,
                                 int64_t inner, const acc_t<T>* __restrict__ mean,
                                 const acc_t<T>* __restrict__ scale, bool from_var, double eps,
                                 const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                                 const T* __restrict__ z, bool relu) {
  using A = acc_t<T>;
  const int64_t step = inner == 1 ? 1 : 0;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < numel / V;
       g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c0 = channel_of(g * V, channels, inner);
    A v[V];
    load_vec<T, V>(x + g * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t c = c0 + j * step;
      A k = from_var ? A(1) / sqrt(scale[c] + static_cast<A>(eps)) : scale[c];
      if (w) k *= w[c];
      v[j] = (v[j] - mean[c]) * k + (b ? b[c] : A(0));
    }
    if (z) {
      A zv[V];
      load_vec<T, V>(z + g * V, zv);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] += zv[j];
    }
    if (relu) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = v[j] > A(0) ? v[j] : A(0);
    }
    store_vec<T, V>(y + g * V, v);
  }
}

// dx = w * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean))), g = dy masked
// by the fused ReLU's output y when there is one; dz = g for the fused add. dx or dz may be dy
// itself (ops/norm.cpp, fused_backward): each thread reads its elements before it writes them.
template <typename T, int V>
__global__ void grad_input_kernel(const T* dy, const T* __restrict__ x, T* dx, int64_t numel,
                                  int64_t channels, int64_t inner, int64_t per_channel,
                                  const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ invstd,
                                  const acc_t<T>* __restrict__ sums, const acc_t<T>* __restrict__ w,
                                  const T* __restrict__ relu_y, T* dz) {
  using A = acc_t<T>;
  const A count = static_cast<A>(per_channel);
  const int64_t step = inner == 1 ? 1 : 0;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < numel / V;
       g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c0 = channel_of(g * V, channels, inner);
    A gv[V], xv[V];
    load_grad<T, V>(dy, relu_y, g * V, gv);
    load_vec<T, V>(x + g * V, xv);
    if (dz) store_vec<T, V>(dz + g * V, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t c = c0 + j * step;
      const A is = invstd[c];
      const A proj = sums[channels + c] / count * is * is;
      const A grad = gv[j] - sums[c] / count - (xv[j] - mean[c]) * proj;
      gv[j] = grad * is * (w ? w[c] : A(1));
    }
    store_vec<T, V>(dx + g * V, gv);
  }
}

}  // namespace

void batch_norm_forward_kernel(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                               double momentum, double eps, const Tensor& z, bool relu) {
  const ChannelBlocks b = blocks_of(in.x);
  if (b.channels == 0) return;
  const cudaStream_t stream = stream_for(in.x);
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    const auto* zp = ptr<const T>(z);
    const int vec = vector_width<T>(b, {x, yp, zp});
    int64_t splits = 0;
    const Tensor partial = channel_sums<T>(StatsTerms<T>{x, b.inner}, b, vec, stats.mean, stream, &splits);
    stats_finalize_kernel<T><<<warp_channel_blocks(b.channels), kSumThreads, 0, stream>>>(
        ptr<A>(partial), splits, x, b.channels, b.inner, b.per_channel(), eps, momentum, ptr<A>(stats.mean),
        ptr<A>(stats.invstd), ptr<A>(in.running_mean), ptr<A>(in.running_var));
    NABLA_CUDA_CHECK_LAUNCH();
    const int64_t numel = in.x.numel();
    with_width<T>(vec, [&]<int V>() {
      normalize_kernel<T, V><<<blocks_for(numel / V, 4), kBlockSize, 0, stream>>>(
          x, yp, numel, b.channels, b.inner, ptr<A>(stats.mean), ptr<A>(stats.invstd), false, eps,
          ptr<A>(in.weight), ptr<A>(in.bias), zp, relu);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_inference_kernel(const BatchNormInputs& in, const Tensor& y, double eps) {
  const int64_t numel = in.x.numel();
  if (numel == 0) return;
  const ChannelBlocks b = blocks_of(in.x);
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    with_width<T>(vector_width<T>(b, {x, yp}), [&]<int V>() {
      normalize_kernel<T, V><<<blocks_for(numel / V, 4), kBlockSize, 0, stream_for(in.x)>>>(
          x, yp, numel, b.channels, b.inner, ptr<A>(in.running_mean), ptr<A>(in.running_var), true, eps,
          ptr<A>(in.weight), ptr<A>(in.bias), nullptr, false);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const BatchNormStats& stats, const BatchNormGrads& grads,
                                const Tensor& relu_y) {
  const ChannelBlocks b = blocks_of(x);
  if (b.channels == 0) return;
  const cudaStream_t stream = stream_for(x);
  Tensor sums = Tensor::empty({2 * b.channels}, stats.mean.options());
  dispatch_device<TypeSet::Floating>(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* xp = static_cast<const T*>(x.data_ptr());
    const auto* dyp = static_cast<const T*>(dy.data_ptr());
    auto* dxp = ptr<T>(grads.dx);
    auto* dzp = ptr<T>(grads.dresidual);
    const auto* yp = ptr<const T>(relu_y);
    const int vec = vector_width<T>(b, {xp, dyp, dxp, dzp, yp});
    int64_t splits = 0;
    const Tensor partial =
        channel_sums<T>(GradTerms<T>{dyp, xp, yp, ptr<A>(stats.mean)}, b, vec, stats.mean, stream, &splits);
    grad_finalize_kernel<A><<<warp_channel_blocks(b.channels), kSumThreads, 0, stream>>>(
        ptr<A>(partial), splits, b.channels, ptr<A>(stats.invstd), ptr<A>(sums), ptr<A>(grads.dweight),
        ptr<A>(grads.dbias));
    NABLA_CUDA_CHECK_LAUNCH();
    NABLA_ASSERT(dxp || !dzp, "batch_norm_backward_kernel: dresidual without dx");
    if (!dxp) return;
    const int64_t numel = x.numel();
    with_width<T>(vec, [&]<int V>() {
      grad_input_kernel<T, V><<<blocks_for(numel / V, 4), kBlockSize, 0, stream>>>(
          dyp, xp, dxp, numel, b.channels, b.inner, b.per_channel(), ptr<A>(stats.mean), ptr<A>(stats.invstd),
          ptr<A>(sums), ptr<A>(weight), yp, dzp);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
