// The batch-norm kernels around fused convolutions (Note [Convolution + batch norm fusion] in
// conv/bn_fused.cpp): the statistics from a convolution's per-channel sums, the normalization
// (+ residual, + ReLU) as one pass from them, and the input gradient from the per-channel
// coefficients cuDNN's backward reductions leave.
#include "nabla/ops/cuda/batch_norm/vectors.cuh"
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/conv/bn_kernels.h"

namespace nabla::ops::cuda {

namespace {

using namespace batch_norm_detail;

// One thread per channel. The variance is E[y^2] - E[y]^2 from float32 sums, taken in double:
// the sums' own rounding (relative 2^-24 of E[y^2]) is what is left, which stays far below
// float16's precision for activations whose mean is within a few standard deviations of zero.
template <typename P>
__global__ void stats_from_sums_kernel(const float* __restrict__ sum, const float* __restrict__ sqsum,
                                       int64_t channels, double count, double eps, double momentum,
                                       const float* __restrict__ w, const float* __restrict__ b,
                                       float* __restrict__ save_mean, float* __restrict__ save_invstd,
                                       float* running_mean, float* running_var, P* __restrict__ scale,
                                       P* __restrict__ shift) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  const double mean = sum[c] / count;
  double var = sqsum[c] / count - mean * mean;
  var = var > 0 ? var : 0;
  const double invstd = 1.0 / sqrt(var + eps);
  save_mean[c] = static_cast<float>(mean);
  save_invstd[c] = static_cast<float>(invstd);
  const double s = w ? invstd * w[c] : invstd;
  scale[c] = store_from<P>(static_cast<opmath_t<P>>(s));
  shift[c] = store_from<P>(static_cast<opmath_t<P>>((b ? b[c] : 0.0) - mean * s));
  if (running_mean) {
    running_mean[c] = static_cast<float>((1 - momentum) * running_mean[c] + momentum * mean);
    const double unbiased = count > 1 ? var * count / (count - 1) : var;
    running_var[c] = static_cast<float>((1 - momentum) * running_var[c] + momentum * unbiased);
  }
}

enum GradCoef { kEqDy, kEqX, kEqBias, kGradCoefs };

// dx = eq_dy * g + eq_x * x + eq_bias per channel.
template <typename T, int V>
__global__ void grad_from_coefficients_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                              T* __restrict__ dx, int64_t numel, int64_t channels,
                                              const float* __restrict__ coef) {
  for_each_vector<float, V, kGradCoefs>(
      numel, channels, /*inner=*/1, coef, [&](int64_t off, const ChannelCoefs<float, V, kGradCoefs>& k) {
        float gv[V], xv[V];
        load_vec<T, V>(g + off, gv);
        load_vec<T, V>(x + off, xv);
#pragma unroll
        for (int j = 0; j < V; ++j) gv[j] = gv[j] * k.v[kEqDy][j] + xv[j] * k.v[kEqX][j] + k.v[kEqBias][j];
        store_vec<T, V>(dx + off, gv);
      });
}

enum ApplyCoef { kScale, kShift, kApplyCoefs };

// y = act(x * scale + shift + residual) per channel: one read of x (and the residual), one
// write, where a batch norm that computes its own statistics reads x twice.
template <typename T, int V, bool kResidual, bool kRelu>
__global__ void apply_kernel(const T* __restrict__ x, const T* __restrict__ residual, T* __restrict__ y,
                             int64_t numel, int64_t channels, const float* __restrict__ coef) {
  for_each_vector<float, V, kApplyCoefs>(numel, channels, /*inner=*/1, coef,
                                         [&](int64_t off, const ChannelCoefs<float, V, kApplyCoefs>& k) {
                                           float xv[V], rv[V];
                                           load_vec<T, V>(x + off, xv);
                                           if constexpr (kResidual) load_vec<T, V>(residual + off, rv);
#pragma unroll
                                           for (int j = 0; j < V; ++j) {
                                             float a = xv[j] * k.v[kScale][j] + k.v[kShift][j];
                                             if constexpr (kResidual) a += rv[j];
                                             if constexpr (kRelu) a = a > 0.0f ? a : 0.0f;
                                             xv[j] = a;
                                           }
                                           store_vec<T, V>(y + off, xv);
                                         });
}

// out = relu(y * scale + shift) per channel (channels_last), scale and shift in y's dtype: the
// fused convolutions' prologue, materialized where no fused engine runs.
template <typename T, int V>
__global__ void affine_relu_kernel(const T* __restrict__ y, const T* __restrict__ scale,
                                   const T* __restrict__ shift, T* __restrict__ out, int64_t numel,
                                   int64_t channels) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t v = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; v < numel / V; v += stride) {
    const int64_t off = v * V, c0 = off % channels;
    float yv[V], sv[V], bv[V];
    load_vec<T, V>(y + off, yv);
    load_vec<T, V>(scale + c0, sv);
    load_vec<T, V>(shift + c0, bv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float a = yv[j] * sv[j] + bv[j];
      yv[j] = a > 0.0f ? a : 0.0f;
    }
    store_vec<T, V>(out + off, yv);
  }
}

}  // namespace

void batch_norm_affine_relu(const Tensor& y, const Tensor& scale, const Tensor& shift, const Tensor& out) {
  const int64_t numel = y.numel(), channels = y.size(1);
  if (numel == 0) return;
  NABLA_ASSERT(y.dtype() == kFloat16 || y.dtype() == kBFloat16,
               "batch_norm_affine_relu: 16-bit inputs only, got {}", describe(y));
  const cudaStream_t stream = stream_for(y);
  dispatch_device<TypeSet::Floating>(y.dtype(), "batch_norm_affine_relu", [&]<typename T>() {
    if constexpr (sizeof(T) == 2) {
      const auto* yp = static_cast<const T*>(y.data_ptr());
      auto* op = static_cast<T*>(out.data_ptr());
      const ChannelBlocks b{.outer = numel / channels, .channels = channels, .inner = 1};
      with_width<T>(vector_width<T>(b, {yp, op, scale.data_ptr(), shift.data_ptr()}), [&]<int V>() {
        affine_relu_kernel<T, V><<<blocks_for(numel / V, 4), kBlockSize, 0, stream>>>(
            yp, static_cast<const T*>(scale.data_ptr()), static_cast<const T*>(shift.data_ptr()), op, numel,
            channels);
      });
      NABLA_CUDA_CHECK_LAUNCH();
    }
  });
}

void batch_norm_stats_from_sums(const Tensor& sum, const Tensor& sqsum, int64_t count,
                                const BatchNormInputs& in, const BatchNormStats& stats, double momentum,
                                double eps, const Tensor& scale, const Tensor& shift) {
  const int64_t channels = sum.numel();
  if (channels == 0) return;
  const cudaStream_t stream = stream_for(sum);
  dispatch_device<TypeSet::Floating>(scale.dtype(), "batch_norm_stats_from_sums", [&]<typename P>() {
    stats_from_sums_kernel<P><<<blocks_for(channels), kBlockSize, 0, stream>>>(
        ptr<const float>(sum), ptr<const float>(sqsum), channels, static_cast<double>(count), eps, momentum,
        ptr<const float>(in.weight), ptr<const float>(in.bias), ptr<float>(stats.mean),
        ptr<float>(stats.invstd), ptr<float>(in.running_mean), ptr<float>(in.running_var), ptr<P>(scale),
        ptr<P>(shift));
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_grad_from_coefficients(const Tensor& grad_pre, const Tensor& x, const Tensor& coefficients,
                                       const Tensor& dx) {
  const int64_t numel = x.numel(), channels = x.size(1);
  if (numel == 0) return;
  NABLA_ASSERT(coefficients.numel() == kGradCoefs * channels && coefficients.dtype() == kFloat32,
               "batch_norm_grad_from_coefficients: expected 3 x {} float32 coefficients", channels);
  const cudaStream_t stream = stream_for(x);
  NABLA_ASSERT(x.dtype() == kFloat16 || x.dtype() == kBFloat16,
               "batch_norm_grad_from_coefficients: 16-bit inputs only, got {}", describe(x));
  for (const Tensor* t : {&grad_pre, &x, &dx}) {
    NABLA_ASSERT(
        t->dtype() == x.dtype() && t->sizes() == x.sizes() && t->is_contiguous(MemoryFormat::ChannelsLast),
        "batch_norm_grad_from_coefficients: expected channels_last tensors like {}, got {}", describe(x),
        describe(*t));
  }
  dispatch_device<TypeSet::Floating>(x.dtype(), "batch_norm_grad_from_coefficients", [&]<typename T>() {
    if constexpr (sizeof(T) == 2) {
      const auto* gp = static_cast<const T*>(grad_pre.data_ptr());
      const auto* xp = static_cast<const T*>(x.data_ptr());
      auto* dxp = static_cast<T*>(dx.data_ptr());
      const ChannelBlocks b{.outer = numel / channels, .channels = channels, .inner = 1};
      with_width<T>(vector_width<T>(b, {gp, xp, dxp}), [&]<int V>() {
        grad_from_coefficients_kernel<T, V>
            <<<elementwise_blocks(x.device().index, numel, channels, 1, V), kBlockSize, 0, stream>>>(
                gp, xp, dxp, numel, channels, ptr<const float>(coefficients));
      });
      NABLA_CUDA_CHECK_LAUNCH();
    }
  });
}

void batch_norm_apply(const Tensor& x, const Tensor& coefficients, const Tensor& residual, bool relu,
                      const Tensor& y) {
  const int64_t numel = x.numel(), channels = x.size(1);
  if (numel == 0) return;
  NABLA_ASSERT(coefficients.numel() == kApplyCoefs * channels && coefficients.dtype() == kFloat32,
               "batch_norm_apply: expected 2 x {} float32 coefficients", channels);
  NABLA_ASSERT(x.dtype() == kFloat16 || x.dtype() == kBFloat16,
               "batch_norm_apply: 16-bit inputs only, got {}", describe(x));
  for (const Tensor* t : {&x, &residual, &y}) {
    NABLA_ASSERT(!t->defined() || (t->dtype() == x.dtype() && t->sizes() == x.sizes() &&
                                   t->is_contiguous(MemoryFormat::ChannelsLast)),
                 "batch_norm_apply: expected channels_last tensors like {}, got {}", describe(x),
                 describe(*t));
  }
  const cudaStream_t stream = stream_for(x);
  dispatch_device<TypeSet::Floating>(x.dtype(), "batch_norm_apply", [&]<typename T>() {
    if constexpr (sizeof(T) == 2) {
      const auto* xp = static_cast<const T*>(x.data_ptr());
      const T* rp = ptr<const T>(residual);
      auto* yp = static_cast<T*>(y.data_ptr());
      const ChannelBlocks b{.outer = numel / channels, .channels = channels, .inner = 1};
      with_width<T>(vector_width<T>(b, {xp, rp, yp}), [&]<int V>() {
        const unsigned grid = elementwise_blocks(x.device().index, numel, channels, 1, V);
        const float* cp = ptr<const float>(coefficients);
        if (rp && relu) {
          apply_kernel<T, V, true, true><<<grid, kBlockSize, 0, stream>>>(xp, rp, yp, numel, channels, cp);
        } else if (relu) {
          apply_kernel<T, V, false, true><<<grid, kBlockSize, 0, stream>>>(xp, rp, yp, numel, channels, cp);
        } else if (rp) {
          apply_kernel<T, V, true, false><<<grid, kBlockSize, 0, stream>>>(xp, rp, yp, numel, channels, cp);
        } else {
          apply_kernel<T, V, false, false><<<grid, kBlockSize, 0, stream>>>(xp, rp, yp, numel, channels, cp);
        }
      });
      NABLA_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace nabla::ops::cuda
