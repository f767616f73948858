// interpolate (ops/interpolate.h): separable resampling, one axis at a time, from index_select
// and per-pixel weights. The source coordinates follow PyTorch's UpSample.h
// (area_pixel_compute_scale and area_pixel_compute_source_index, nearest_idx, the cubic
// convolution coefficients), so the values match it to rounding.
#include "nabla/ops/interpolate.h"

#include <cmath>
#include <vector>

#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"

namespace nabla {

namespace {

// One axis: out[i] = sum_k weight[k][i] * x[index[k][i]] along `dim`.
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
};

// Source scale of an axis: PyTorch's area_pixel_compute_scale.
double axis_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  return scale_factor ? 1.0 / *scale_factor : static_cast<double>(in) / static_cast<double>(out);
}

int64_t clamp_index(int64_t i, int64_t in) {
  return i < 0 ? 0 : (i >= in ? in - 1 : i);
}

// The cubic convolution weights of the four taps around t in [0, 1) (A = -0.75, as PyTorch).
std::array<double, 4> cubic_weights(double t) {
  constexpr double a = -0.75;
  const auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };       // |x| <= 1
  const auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };  // 1 < |x| < 2
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

Taps taps_of(int64_t in, int64_t out, Interpolation mode, bool align_corners,
             std::optional<double> scale_factor) {
  const double scale = axis_scale(in, out, mode != Interpolation::nearest && align_corners, scale_factor);
  const int k = mode == Interpolation::nearest ? 1 : mode == Interpolation::bilinear ? 2 : 4;
  Taps t{std::vector<std::vector<int64_t>>(k, std::vector<int64_t>(out)),
         std::vector<std::vector<double>>(k, std::vector<double>(out))};
  for (int64_t i = 0; i < out; ++i) {
    const auto d = static_cast<double>(i);
    if (mode == Interpolation::nearest) {
      // In float, as PyTorch's nearest_idx computes it (a product just below an integer floors
      // one lower than in exact arithmetic, and must match).
      const float s = scale_factor ? static_cast<float>(1.0 / *scale_factor)
                                   : static_cast<float>(in) / static_cast<float>(out);
      t.index[0][i] = out == in ? i
                      : out == 2 * in
                          ? i / 2
                          : std::min(static_cast<int64_t>(std::floor(static_cast<float>(i) * s)), in - 1);
      t.weight[0][i] = 1.0;
      continue;
    }
    // area_pixel_compute_source_index; linear clamps a negative source to 0, cubic does not.
    double src = align_corners ? d * scale : scale * (d + 0.5) - 0.5;
    if (mode == Interpolation::bilinear) {
      if (!align_corners && src < 0) src = 0;
      const auto i0 = static_cast<int64_t>(std::floor(src));
      const double l = src - static_cast<double>(i0);
      t.index[0][i] = clamp_index(i0, in);
      t.index[1][i] = clamp_index(i0 + 1, in);
      t.weight[0][i] = 1.0 - l;
      t.weight[1][i] = l;
    } else {
      const auto i0 = static_cast<int64_t>(std::floor(src));
      const std::array<double, 4> w = cubic_weights(src - static_cast<double>(i0));
      for (int j = 0; j < 4; ++j) {
        t.index[j][i] = clamp_index(i0 - 1 + j, in);
        t.weight[j][i] = w[j];
      }
    }
  }
  return t;
}

Tensor resample_axis(const Tensor& x, int64_t dim, const Taps& taps) {
  Tensor out;
  for (size_t k = 0; k < taps.index.size(); ++k) {
    const auto n = static_cast<int64_t>(taps.index[k].size());
    const Tensor index = tensor(taps.index[k], {n}).to(x.device());
    Tensor term = index_select(x, dim, index);
    if (taps.index.size() > 1) {
      Shape shape(static_cast<size_t>(x.dim()), 1);
      shape[static_cast<size_t>(dim)] = n;
      term = term * tensor(taps.weight[k], {n}).to(x.device(), x.dtype()).reshape(shape);
    }
    out = out.defined() ? out + term : term;
  }
  return out;
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  ops::check_defined("interpolate", x, "input");
  NABLA_CHECK(x.dim() == 4, "interpolate: expected a 4-d input (N, C, H, W), got {}", describe(x));
  NABLA_CHECK(x.is_floating_point(), "interpolate: expected a floating-point input, got {}", describe(x));
  NABLA_CHECK(o.size.has_value() != o.scale_factor.has_value(),
              "interpolate: give exactly one of size and scale_factor");
  NABLA_CHECK(!o.align_corners || o.mode != Interpolation::nearest,
              "interpolate: align_corners is for bilinear and bicubic, not nearest");
  std::array<int64_t, 2> out{};
  if (o.size) {
    out = *o.size;
    NABLA_CHECK(out[0] > 0 && out[1] > 0, "interpolate: expected a positive size, got ({}, {})", out[0],
                out[1]);
  } else {
    NABLA_CHECK(*o.scale_factor > 0 && std::isfinite(*o.scale_factor),
                "interpolate: expected a positive scale_factor, got {}", *o.scale_factor);
    for (int i = 0; i < 2; ++i) {
      out[i] = static_cast<int64_t>(std::floor(static_cast<double>(x.size(2 + i)) * *o.scale_factor));
      NABLA_CHECK(out[i] > 0, "interpolate: scale_factor {} leaves input {} empty", *o.scale_factor,
                  describe(x));
    }
  }
  NABLA_CHECK(x.size(2) > 0 && x.size(3) > 0, "interpolate: the input {} has no pixels", describe(x));
  const MemoryFormat format = x.suggest_memory_format();
  // 16-bit x is resampled in float32 and rounded once at the end.
  Tensor y = is_reduced_float(x.dtype()) ? x.to(kFloat32) : x;
  for (int i = 0; i < 2; ++i) {
    y = resample_axis(y, 2 + i, taps_of(x.size(2 + i), out[i], o.mode, o.align_corners, o.scale_factor));
  }
  return y.to(x.dtype()).contiguous(format);
}

}  // namespace nabla
