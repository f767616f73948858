// nabla's own CUDA batch-norm kernels, for the calls cuDNN does not take (Note [cuDNN batch
// norm] in batch_norm/cudnn.cpp): every contiguous (NCHW) input and float32/float16/bfloat16
// channels_last training, where they are faster than cuDNN's, bfloat16 eval, very large batches,
// and anything cuDNN refuses. So they are built for bandwidth, not only for correctness
// (bench/cuda/batch_norm_shapes.cpp times them at ResNet-50's shapes).
//
// Statistics and gradient sums take two kernels each: the partial sums of batch_norm/sums.cuh,
// then one warp per channel that adds a channel's partials in a fixed order (deterministic)
// and finishes the statistics. The variance is one pass over x, shifted by the channel's first
// element (a sample of the channel, so the shifted mean is small and E[d^2] - E[d]^2 does not
// cancel even when the mean is far from zero). The finishing kernels also leave per-channel
// coefficients for the elementwise pass, which moves 8/4/2 elements per load where the layout
// allows (for_each_vector). Float16/bfloat16 compute in float; the statistics are float (double
// for float64).
//
// Note [The ReLU's mask from x]
// The backward of relu(bn(x)) masks dy where the output was zero. Reading the output y for that
// costs a pass over an activation in each of the backward's two kernels: seven passes in all
// (dy, x, y; dy, x, y, dx). When nabla's forward kernel wrote y, the backward recomputes the
// mask from x instead: the same pre-activation (batch_normalized, the forward's coefficients
// and formula) tested as the forward stored it, rounded to y's dtype (relu_passes: a positive
// value at or below half of float16's smallest subnormal stores as a zero y), so it is the same
// mask bit for bit: five passes. relu(bn(x) + z) still reads y, and the masked gradient written by its sums
// pass, z's, replaces dy and y in its dx pass.
#include "nabla/ops/cuda/batch_norm/finish.cuh"
#include "nabla/ops/cuda/batch_norm/kernels.h"
#include "nabla/ops/cuda/batch_norm/sums.cuh"
#include "nabla/ops/cuda/batch_norm/vectors.cuh"
#include "nabla/ops/cuda/common.cuh"

namespace nabla::ops::cuda {

namespace {

using namespace batch_norm_detail;

template <typename T>
__global__ void stats_finalize_kernel(const opmath_t<T>* __restrict__ partial, int64_t splits,
                                      const T* __restrict__ x, int64_t channels, int64_t inner, int64_t count,
                                      double eps, double momentum, StatsOut<opmath_t<T>> out) {
  using A = opmath_t<T>;
  const int64_t c = warp_channel();
  if (c >= channels) return;  // the whole warp
  A s0, s1;
  warp_total_of(partial, splits, c, s0, s1);
  if (threadIdx.x % 32 != 0) return;
  finish_stats(c, channels, s0, s1, load_as_opmath(x[c * inner]), count, eps, momentum, out);
}

// Eval: the forward coefficients from the running statistics.
template <typename A>
__global__ void inference_coef_kernel(const A* __restrict__ running_mean, const A* __restrict__ running_var,
                                      const A* __restrict__ w, const A* __restrict__ b, double eps,
                                      int64_t channels, A* __restrict__ coef) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  const A invstd = A(1) / sqrt(running_var[c] + static_cast<A>(eps));
  coef[kMean * channels + c] = running_mean[c];
  coef[kScale * channels + c] = w ? invstd * w[c] : invstd;
  coef[kShift * channels + c] = b ? b[c] : A(0);
}

// From the partial sums of dy and dy * (x - mean): the weight and bias gradients and the
// backward coefficients.
template <typename A>
__global__ void grad_finalize_kernel(const A* __restrict__ partial, int64_t splits, int64_t channels,
                                     int64_t count, GradOut<A> out) {
  const int64_t c = warp_channel();
  if (c >= channels) return;  // the whole warp
  A s0, s1;
  warp_total_of(partial, splits, c, s0, s1);
  if (threadIdx.x % 32 != 0) return;
  finish_grads(c, channels, s0, s1, count, out);
}

// ---- elementwise -----------------------------------------------------------------------------

// y = (x - mean) * scale + shift per channel; the fused variants add z and/or apply a ReLU to it.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockSize, 2)
    normalize_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t numel, int64_t channels,
                     int64_t inner, const opmath_t<T>* __restrict__ coef, const T* __restrict__ z,
                     bool relu) {
  using A = opmath_t<T>;
  Vec<T, V> xr[kRowsInFlight], zr[kRowsInFlight];
  for_each_vector_batched<A, V, kForwardCoefs>(
      numel, channels, inner, coef,
      [&](int64_t off, int u) {
        xr[u] = load_raw<T, V>(x + off);
        if (z) zr[u] = load_raw<T, V>(z + off);
      },
      [&](int64_t off, int u, const ChannelCoefs<A, V, kForwardCoefs>& k) {
        A v[V], zv[V];
        widen<T, V>(xr[u], v);
        if (z) widen<T, V>(zr[u], zv);
        normalize_values<A, V>(v, zv, z != nullptr, relu, k);
        store_vec<T, V>(y + off, v);
      });
}

// dx = (g - mean(g) - (x - mean) * proj) * invstd * w (the coefficients above), g = dy masked by
// the fused ReLU's output y when there is one, or by the mask recomputed from x (MaskFromX);
// dz = g for the fused add. dx or dz may be dy itself (ops/norm.cpp, fused_backward): each
// thread reads its elements before it writes them.
template <typename T, int V, bool MaskFromX>
__global__ void __launch_bounds__(kBlockSize, 2)
    grad_input_kernel(const T* dy, const T* __restrict__ x, T* dx, int64_t numel, int64_t channels,
                      int64_t inner, const opmath_t<T>* __restrict__ coef, const T* __restrict__ relu_y,
                      T* dz) {
  using A = opmath_t<T>;
  constexpr int K = MaskFromX ? kBackwardMaskCoefs : kBackwardCoefs;
  Vec<T, V> dyr[kRowsInFlight], xr[kRowsInFlight], yr[kRowsInFlight];
  for_each_vector_batched<A, V, K>(
      numel, channels, inner, coef,
      [&](int64_t off, int u) {
        dyr[u] = load_raw<T, V>(dy + off);
        xr[u] = load_raw<T, V>(x + off);
        if (relu_y) yr[u] = load_raw<T, V>(relu_y + off);
      },
      [&](int64_t off, int u, const ChannelCoefs<A, V, K>& k) {
        A gv[V], xv[V];
        widen<T, V>(dyr[u], gv);
        widen<T, V>(xr[u], xv);
        if (relu_y) {
          A yv[V];
          widen<T, V>(yr[u], yv);
#pragma unroll
          for (int j = 0; j < V; ++j) gv[j] = yv[j] > A(0) ? gv[j] : A(0);
        }
        if constexpr (MaskFromX) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const A pre = batch_normalized(xv[j], k.v[kXMean][j], k.v[kFwdScale][j], k.v[kFwdShift][j]);
            gv[j] = relu_passes<T>(pre) ? gv[j] : A(0);
          }
        }
        if (dz) store_vec<T, V>(dz + off, gv);
        grad_input_values<A, V>(gv, xv, k);
        store_vec<T, V>(dx + off, gv);
      });
}

}  // namespace

void batch_norm_forward_kernel(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                               double momentum, double eps, const Tensor& z, bool relu) {
  const ChannelBlocks b = blocks_of(in.x);
  if (b.channels == 0) return;
  const cudaStream_t stream = stream_for(in.x);
  const Tensor coef = Tensor::empty({kForwardCoefs * b.channels}, stats.mean.options());
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = opmath_t<T>;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    const auto* zp = ptr<const T>(z);
    const int vec = vector_width<T>(b, {x, yp, zp});
    int64_t splits = 0;
    const Tensor partial = channel_sums<T>(StatsTerms<T>{x, b.inner}, b, vec, stats.mean, stream, &splits);
    stats_finalize_kernel<T><<<warp_channel_blocks(b.channels), kSumThreads, 0, stream>>>(
        ptr<A>(partial), splits, x, b.channels, b.inner, b.per_channel(), eps, momentum,
        StatsOut<A>{ptr<A>(in.weight), ptr<A>(in.bias), ptr<A>(stats.mean), ptr<A>(stats.invstd),
                    ptr<A>(in.running_mean), ptr<A>(in.running_var), ptr<A>(coef)});
    NABLA_CUDA_CHECK_LAUNCH();
    const int64_t numel = in.x.numel();
    with_width<T>(vec, [&]<int V>() {
      normalize_kernel<T, V>
          <<<elementwise_blocks(in.x.device().index, numel, b.channels, b.inner, V), kBlockSize, 0, stream>>>(
              x, yp, numel, b.channels, b.inner, ptr<A>(coef), zp, relu);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_inference_kernel(const BatchNormInputs& in, const Tensor& y, double eps) {
  const int64_t numel = in.x.numel();
  if (numel == 0) return;
  const ChannelBlocks b = blocks_of(in.x);
  const cudaStream_t stream = stream_for(in.x);
  const Tensor coef = Tensor::empty({kForwardCoefs * b.channels}, in.running_mean.options());
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = opmath_t<T>;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    inference_coef_kernel<A><<<blocks_for(b.channels), kBlockSize, 0, stream>>>(
        ptr<A>(in.running_mean), ptr<A>(in.running_var), ptr<A>(in.weight), ptr<A>(in.bias), eps, b.channels,
        ptr<A>(coef));
    NABLA_CUDA_CHECK_LAUNCH();
    with_width<T>(vector_width<T>(b, {x, yp}), [&]<int V>() {
      normalize_kernel<T, V>
          <<<elementwise_blocks(in.x.device().index, numel, b.channels, b.inner, V), kBlockSize, 0, stream>>>(
              x, yp, numel, b.channels, b.inner, ptr<A>(coef), nullptr, false);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const BatchNormStats& stats, const BatchNormGrads& grads,
                                const Tensor& relu_y, const ReluMaskFromX& mask_from_x) {
  const ChannelBlocks b = blocks_of(x);
  if (b.channels == 0) return;
  NABLA_ASSERT(!mask_from_x.on || (!relu_y.defined() && !grads.dresidual.defined()),
               "batch_norm_backward_kernel: the mask from x is relu(bn(x))'s, with no residual and no y");
  const cudaStream_t stream = stream_for(x);
  const bool from_x = mask_from_x.on;
  const Tensor coef =
      Tensor::empty({(from_x ? kBackwardMaskCoefs : kBackwardCoefs) * b.channels}, stats.mean.options());
  dispatch_device<TypeSet::Floating>(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    const auto* xp = static_cast<const T*>(x.data_ptr());
    const auto* dyp = static_cast<const T*>(dy.data_ptr());
    auto* dxp = ptr<T>(grads.dx);
    auto* dzp = ptr<T>(grads.dresidual);
    const auto* yp = ptr<const T>(relu_y);
    const int vec = vector_width<T>(b, {xp, dyp, dxp, dzp, yp});
    // relu(bn(x) + z): the sums pass writes g = dy * (y > 0), z's gradient, as it reads it, and
    // the dx pass reads g instead of dy and y (one pass fewer over the activation).
    const bool mask_in_sums = yp != nullptr && dzp != nullptr && dxp != nullptr;
    int64_t splits = 0;
    GradTerms<T> terms{dyp, xp, yp, ptr<A>(stats.mean), mask_in_sums ? dzp : nullptr};
    if (from_x) {
      terms.invstd = ptr<A>(stats.invstd);
      terms.weight = ptr<A>(weight);
      terms.bias = ptr<A>(mask_from_x.bias);
    }
    const Tensor partial = channel_sums<T>(terms, b, vec, stats.mean, stream, &splits);
    grad_finalize_kernel<A><<<warp_channel_blocks(b.channels), kSumThreads, 0, stream>>>(
        ptr<A>(partial), splits, b.channels, b.per_channel(),
        GradOut<A>{ptr<A>(stats.mean), ptr<A>(stats.invstd), ptr<A>(weight), ptr<A>(mask_from_x.bias), from_x,
                   ptr<A>(coef), ptr<A>(grads.dweight), ptr<A>(grads.dbias)});
    NABLA_CUDA_CHECK_LAUNCH();
    NABLA_ASSERT(dxp || !dzp, "batch_norm_backward_kernel: dresidual without dx");
    if (!dxp) return;
    const int64_t numel = x.numel();
    with_width<T>(vec, [&]<int V>() {
      const auto launch = [&]<bool MaskFromX>() {
        grad_input_kernel<T, V, MaskFromX>
            <<<elementwise_blocks(x.device().index, numel, b.channels, b.inner, V), kBlockSize, 0, stream>>>(
                mask_in_sums ? dzp : dyp, xp, dxp, numel, b.channels, b.inner, ptr<A>(coef),
                mask_in_sums ? nullptr : yp, mask_in_sums ? nullptr : dzp);
      };
      if (from_x) {
        launch.template operator()<true>();
      } else {
        launch.template operator()<false>();
      }
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
