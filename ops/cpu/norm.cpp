// CPU batch norm and layer norm, forward and backward.
//
// Batch norm (the CPU backend of ops/detail/batch_norm.h) reads x (N, C, *), dense in contiguous
// or channels_last order, in place as `outer` blocks of (C, inner) elements (inner = prod(*) for
// contiguous x, 1 for channels_last or (N, C) x), so a channels_last input is never transposed. Per-channel
// sums are deterministic: the work split depends only on the shape, never on the thread count. Two layouts of
// work:
//  - blocks of many elements (contiguous x with a large H * W): one task per channel, each
//    summing its runs of `inner` contiguous elements;
//  - small blocks (channels_last, (N, C), small images): tasks over chunks of blocks, each
//    keeping partial sums for every channel, which are then added in chunk order.
// The variance is two-pass (mean first, then squared deviations) and every sum is kept in
// double, so float32 statistics are exact to float precision. The normalization itself runs
// in the compute type (float for float16/bfloat16/float32, double for float64).
//
// Layer norm works on contiguous rows: one task per row for the statistics and dx, one task per
// block of columns for the weight and bias gradients.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/cpu/norm_kernels.h"
#include "nabla/ops/detail/batch_norm.h"
#include "nabla/ops/detail/channel_blocks.h"

namespace nabla::ops::cpu {

namespace {

constexpr int64_t kChunk = 16384;     // elements per partial sum of the chunked path
constexpr int64_t kColumnBlock = 64;  // layer-norm weight-gradient columns per task

// The parameter (statistics) type for a storage type.
template <typename T>
using param_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

bool run_parallel(int64_t numel) {
  return numel >= kParallelGrain && !omp_in_parallel();
}

// Per channel, the sums of K values that f(c, offset, count, acc) adds for a run of `count`
// contiguous elements of channel c starting at `offset`.
template <int K, typename F>
std::vector<std::array<double, K>> channel_sums(const ChannelBlocks& b, F f) {
  std::vector<std::array<double, K>> sums(b.channels, std::array<double, K>{});
  const bool parallel = run_parallel(b.outer * b.channels * b.inner);
  if (b.channels * b.inner > kChunk) {
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t c = 0; c < b.channels; ++c) {
      for (int64_t o = 0; o < b.outer; ++o) f(c, b.offset(o, c), b.inner, sums[c]);
    }
    return sums;
  }
  const int64_t rows = std::max<int64_t>(1, kChunk / std::max<int64_t>(1, b.channels * b.inner));
  const int64_t chunks = (b.outer + rows - 1) / rows;
  std::vector<std::array<double, K>> partial(chunks * b.channels, std::array<double, K>{});
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    std::array<double, K>* acc = partial.data() + chunk * b.channels;
    const int64_t end = std::min(b.outer, (chunk + 1) * rows);
    for (int64_t o = chunk * rows; o < end; ++o) {
      for (int64_t c = 0; c < b.channels; ++c) f(c, b.offset(o, c), b.inner, acc[c]);
    }
  }
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    for (int64_t c = 0; c < b.channels; ++c) {
      for (int k = 0; k < K; ++k) sums[c][k] += partial[chunk * b.channels + c][k];
    }
  }
  return sums;
}

// y = x * scale[c] + shift[c] over every element.
template <typename T>
void apply_affine(const ChannelBlocks& b, const T* x, T* y, const std::vector<compute_t<T>>& scale,
                  const std::vector<compute_t<T>>& shift) {
  using C = compute_t<T>;
#pragma omp parallel for if (run_parallel(b.outer * b.channels * b.inner)) schedule(static)
  for (int64_t oc = 0; oc < b.outer * b.channels; ++oc) {
    const int64_t c = oc % b.channels, base = oc * b.inner;
    const C a = scale[c], s = shift[c];
    for (int64_t i = 0; i < b.inner; ++i) y[base + i] = static_cast<T>(static_cast<C>(x[base + i]) * a + s);
  }
}

template <typename P>
P value_or(const Tensor& t, int64_t i, P fallback) {
  return t.defined() ? t.data_ptr<P>()[i] : fallback;
}

template <typename T>
void batch_norm_forward_typed(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                              double momentum, double eps) {
  using P = param_t<T>;
  using C = compute_t<T>;
  const ChannelBlocks b = blocks_of(in.x);
  const T* x = in.x.data_ptr<T>();
  const auto sums = channel_sums<1>(b, [x](int64_t, int64_t off, int64_t n, std::array<double, 1>& acc) {
    for (int64_t i = 0; i < n; ++i) acc[0] += static_cast<double>(x[off + i]);
  });
  const double count = static_cast<double>(b.per_channel());
  std::vector<double> mean(b.channels);
  for (int64_t c = 0; c < b.channels; ++c) mean[c] = sums[c][0] / count;
  const auto squares =
      channel_sums<1>(b, [x, &mean](int64_t c, int64_t off, int64_t n, std::array<double, 1>& acc) {
        for (int64_t i = 0; i < n; ++i) {
          const double d = static_cast<double>(x[off + i]) - mean[c];
          acc[0] += d * d;
        }
      });
  std::vector<C> scale(b.channels), shift(b.channels);
  P* save_mean = stats.mean.data_ptr<P>();
  P* save_invstd = stats.invstd.data_ptr<P>();
  for (int64_t c = 0; c < b.channels; ++c) {
    const double var = squares[c][0] / count;
    const double invstd = 1.0 / std::sqrt(var + eps);
    save_mean[c] = static_cast<P>(mean[c]);
    save_invstd[c] = static_cast<P>(invstd);
    const double w = value_or<P>(in.weight, c, P(1)), bias = value_or<P>(in.bias, c, P(0));
    scale[c] = static_cast<C>(invstd * w);
    shift[c] = static_cast<C>(bias - mean[c] * invstd * w);
    if (in.running_mean.defined()) {
      P* rm = in.running_mean.data_ptr<P>();
      P* rv = in.running_var.data_ptr<P>();
      rm[c] = static_cast<P>((1.0 - momentum) * rm[c] + momentum * mean[c]);
      rv[c] = static_cast<P>((1.0 - momentum) * rv[c] + momentum * squares[c][0] / (count - 1.0));
    }
  }
  apply_affine<T>(b, x, y.data_ptr<T>(), scale, shift);
}

template <typename T>
void batch_norm_inference_typed(const BatchNormInputs& in, const Tensor& y, double eps) {
  using P = param_t<T>;
  using C = compute_t<T>;
  const ChannelBlocks b = blocks_of(in.x);
  std::vector<C> scale(b.channels), shift(b.channels);
  const P* rm = in.running_mean.data_ptr<P>();
  const P* rv = in.running_var.data_ptr<P>();
  for (int64_t c = 0; c < b.channels; ++c) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
    const double w = value_or<P>(in.weight, c, P(1)), bias = value_or<P>(in.bias, c, P(0));
    scale[c] = static_cast<C>(invstd * w);
    shift[c] = static_cast<C>(bias - rm[c] * invstd * w);
  }
  apply_affine<T>(b, in.x.data_ptr<T>(), y.data_ptr<T>(), scale, shift);
}

template <typename T>
void batch_norm_backward_typed(const Tensor& dy_t, const Tensor& x_t, const Tensor& weight,
                               const BatchNormStats& stats, const Tensor& dx_t, const Tensor& dweight,
                               const Tensor& dbias) {
  using P = param_t<T>;
  using C = compute_t<T>;
  const ChannelBlocks b = blocks_of(x_t);
  const T* x = x_t.data_ptr<T>();
  const T* dy = dy_t.data_ptr<T>();
  const P* mean = stats.mean.data_ptr<P>();
  const P* invstd = stats.invstd.data_ptr<P>();
  // Per channel: sum(dy) and sum(dy * (x - mean)).
  const auto sums = channel_sums<2>(b, [=](int64_t c, int64_t off, int64_t n, std::array<double, 2>& acc) {
    const double m = mean[c];
    for (int64_t i = 0; i < n; ++i) {
      const double g = static_cast<double>(dy[off + i]);
      acc[0] += g;
      acc[1] += g * (static_cast<double>(x[off + i]) - m);
    }
  });
  for (int64_t c = 0; c < b.channels; ++c) {
    if (dweight.defined()) dweight.data_ptr<P>()[c] = static_cast<P>(sums[c][1] * invstd[c]);
    if (dbias.defined()) dbias.data_ptr<P>()[c] = static_cast<P>(sums[c][0]);
  }
  if (!dx_t.defined()) return;
  // dx = w * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean)))
  const double count = static_cast<double>(b.per_channel());
  std::vector<C> dy_mean(b.channels), proj(b.channels), gain(b.channels), m(b.channels);
  for (int64_t c = 0; c < b.channels; ++c) {
    const double is = invstd[c];
    dy_mean[c] = static_cast<C>(sums[c][0] / count);
    proj[c] = static_cast<C>(sums[c][1] / count * is * is);
    gain[c] = static_cast<C>(is * value_or<P>(weight, c, P(1)));
    m[c] = static_cast<C>(mean[c]);
  }
  T* dx = dx_t.data_ptr<T>();
#pragma omp parallel for if (run_parallel(b.outer * b.channels * b.inner)) schedule(static)
  for (int64_t oc = 0; oc < b.outer * b.channels; ++oc) {
    const int64_t c = oc % b.channels, base = oc * b.inner;
    for (int64_t i = 0; i < b.inner; ++i) {
      const C xmu = static_cast<C>(x[base + i]) - m[c];
      dx[base + i] = static_cast<T>((static_cast<C>(dy[base + i]) - dy_mean[c] - xmu * proj[c]) * gain[c]);
    }
  }
}

// ---- layer norm ------------------------------------------------------------------------------

template <typename T>
void layer_norm_forward_typed(const Tensor& x_t, const Tensor& weight, const Tensor& bias, double eps,
                              const Tensor& y_t, const Tensor& mean_t, const Tensor& rstd_t, RowNorm kind) {
  using P = param_t<T>;
  using C = compute_t<T>;
  const int64_t D = x_t.size(-1), rows = D == 0 ? 0 : x_t.numel() / D;
  const T* x = x_t.data_ptr<T>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const T* b = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* y = y_t.data_ptr<T>();
  P* mean_out = mean_t.data_ptr<P>();
  P* rstd_out = rstd_t.data_ptr<P>();
#pragma omp parallel for if (run_parallel(x_t.numel())) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    double sum = 0;
    if (kind == RowNorm::Layer) {
      for (int64_t j = 0; j < D; ++j) sum += static_cast<double>(xr[j]);
    }
    const double mean = sum / static_cast<double>(D);
    double squares = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double d = static_cast<double>(xr[j]) - mean;
      squares += d * d;
    }
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(D) + eps);
    mean_out[r] = static_cast<P>(mean);
    rstd_out[r] = static_cast<P>(rstd);
    const C m = static_cast<C>(mean), s = static_cast<C>(rstd);
    T* yr = y + r * D;
    for (int64_t j = 0; j < D; ++j) {
      C v = (static_cast<C>(xr[j]) - m) * s;
      if (w) v *= static_cast<C>(w[j]);
      if (b) v += static_cast<C>(b[j]);
      yr[j] = static_cast<T>(v);
    }
  }
}

template <typename T>
void layer_norm_backward_typed(const Tensor& dy_t, const Tensor& x_t, const Tensor& weight,
                               const Tensor& mean_t, const Tensor& rstd_t, const Tensor& dx_t,
                               const Tensor& dweight, const Tensor& dbias, RowNorm kind) {
  using P = param_t<T>;
  const int64_t D = x_t.size(-1), rows = D == 0 ? 0 : x_t.numel() / D;
  const T* x = x_t.data_ptr<T>();
  const T* dy = dy_t.data_ptr<T>();
  const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
  const P* mean = mean_t.data_ptr<P>();
  const P* rstd = rstd_t.data_ptr<P>();
  const bool parallel = run_parallel(x_t.numel());
  if (dx_t.defined()) {
    T* dx = dx_t.data_ptr<T>();
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w; RMS norm drops mean(g).
    const double centred = kind == RowNorm::Layer ? 1.0 : 0.0;
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * D;
      const T* gr = dy + r * D;
      const double m = mean[r], s = rstd[r];
      double sum_g = 0, sum_gx = 0;
      for (int64_t j = 0; j < D; ++j) {
        const double g = static_cast<double>(gr[j]) * (w ? static_cast<double>(w[j]) : 1.0);
        sum_g += g;
        sum_gx += g * (static_cast<double>(xr[j]) - m) * s;
      }
      const double g_mean = centred * sum_g / static_cast<double>(D),
                   gx_mean = sum_gx / static_cast<double>(D);
      for (int64_t j = 0; j < D; ++j) {
        const double g = static_cast<double>(gr[j]) * (w ? static_cast<double>(w[j]) : 1.0);
        const double xhat = (static_cast<double>(xr[j]) - m) * s;
        dx[r * D + j] = static_cast<T>(s * (g - g_mean - xhat * gx_mean));
      }
    }
  }
  if (!dweight.defined() && !dbias.defined()) return;
  const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kColumnBlock, n = std::min(kColumnBlock, D - j0);
    std::array<double, kColumnBlock> acc_w{}, acc_b{};
    for (int64_t r = 0; r < rows; ++r) {
      const double m = mean[r], s = rstd[r];
      for (int64_t j = 0; j < n; ++j) {
        const double g = static_cast<double>(dy[r * D + j0 + j]);
        acc_w[j] += g * (static_cast<double>(x[r * D + j0 + j]) - m) * s;
        acc_b[j] += g;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      if (dweight.defined()) dweight.data_ptr<T>()[j0 + j] = static_cast<T>(acc_w[j]);
      if (dbias.defined()) dbias.data_ptr<T>()[j0 + j] = static_cast<T>(acc_b[j]);
    }
  }
}

// The CPU batch-norm backend (ops/detail/batch_norm.h): one route, no fused forms (front ends
// compose batch_norm, add and relu on the CPU).
BatchNormSaved batch_norm_forward(const BatchNormInputs& in, const Tensor& z, bool relu, const Tensor& y,
                                  const BatchNormStats& stats, double momentum, double eps) {
  NABLA_ASSERT(!relu && !z.defined(), "batch norm: the CPU backend has no fused ReLU or add");
  dispatch<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    batch_norm_forward_typed<T>(in, y, stats, momentum, eps);
  });
  return {.x = in.x, .weight = in.weight, .stats = stats};
}

void batch_norm_inference(const BatchNormInputs& in, const Tensor& y, double eps) {
  if (in.x.numel() == 0) return;
  dispatch<TypeSet::Floating>(in.x.dtype(), "batch_norm",
                              [&]<typename T>() { batch_norm_inference_typed<T>(in, y, eps); });
}

void batch_norm_backward(const Tensor& dy, const BatchNormSaved& s, double /*eps*/, const BatchNormGrads& g) {
  dispatch<TypeSet::Floating>(s.x.dtype(), "batch_norm_backward", [&]<typename T>() {
    batch_norm_backward_typed<T>(dy, s.x, s.weight, s.stats, g.dx, g.dweight, g.dbias);
  });
}

}  // namespace

const BatchNormBackend kBatchNorm{.fuses_relu = [](const Tensor&) { return false; },
                                  .forward = batch_norm_forward,
                                  .inference = batch_norm_inference,
                                  .backward = batch_norm_backward};

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd, RowNorm kind) {
  dispatch<TypeSet::Floating>(x.dtype(), "layer_norm", [&]<typename T>() {
    layer_norm_forward_typed<T>(x, weight, bias, eps, y, mean, rstd, kind);
  });
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         RowNorm kind) {
  dispatch<TypeSet::Floating>(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    layer_norm_backward_typed<T>(dy, x, weight, mean, rstd, dx, dweight, dbias, kind);
  });
}

}  // namespace nabla::ops::cpu
