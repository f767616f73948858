// Rotary embeddings' front end: the frequencies (with Llama 3's rescaling), the cos/sin tables,
// and the differentiable rotation that runs the backend's kernel (ops/detail/rotary.h) each way.
#include "nabla/ops/rotary.h"

#include <cmath>
#include <numbers>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/rotary.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"

namespace nabla {

using autograd::BackwardContext;

namespace {

constexpr const char* kOp = "rotary_embedding";

// A fresh buffer laid out as x where x is dense (so the (B, H, T, D) view of a (B, T, H, D)
// projection gives one whose transpose back is contiguous), else contiguous.
Tensor empty_in_layout(const Tensor& x) {
  if (!is_non_overlapping_and_dense(x.sizes(), x.strides())) return Tensor::empty(x.sizes(), x.options());
  return ops::alias(Tensor::empty({x.numel()}, x.options()), x.sizes(), x.strides(), 0);
}

// x rotated by the angles of table rows offset .. offset + T - 1 (by minus them when inverse).
// The gradient is the inverse rotation of the output's gradient: nothing else is saved.
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, bool interleaved,
              bool inverse) {
  Tensor out = empty_in_layout(x);
  const ops::RotaryCall call{.x = x,
                             .out = out,
                             .cos = cos,
                             .sin = sin,
                             .offset = offset,
                             .interleaved = interleaved,
                             .inverse = inverse};
  ops::on_rotary(kOp, x, [&](const ops::RotaryKernels& kernels) { kernels.rotate(call); });
  if (autograd::needs_grad({x})) {
    autograd::record("RotaryEmbeddingBackward", {x}, {out}, {cos, sin},
                     [offset, interleaved, inverse](BackwardContext& ctx) -> TensorList {
                       return {rotate(ctx.grad(), ctx.saved[0], ctx.saved[1], offset, interleaved, !inverse)};
                     });
  }
  return out;
}

void check_input(const Tensor& x, int64_t head_dim) {
  ops::check_defined(kOp, x, "input");
  NABLA_CHECK(x.is_floating_point() && x.dim() >= 2 && x.dim() <= ops::RotaryCall::kMaxDims &&
                  x.size(-1) % 2 == 0 && x.size(-1) >= 2 && (head_dim == 0 || x.size(-1) == head_dim),
              "{}: expected a floating (..., T, D) input of 2 to {} dims with D even and >= 2{}, got {}", kOp,
              ops::RotaryCall::kMaxDims, head_dim == 0 ? "" : fmt::format(" and D = {}", head_dim),
              describe(x));
}

// The float64 tables cos(t f_i), sin(t f_i) for t in [0, positions), computed on the host.
std::pair<Tensor, Tensor> host_tables(const std::vector<double>& frequencies, int64_t positions) {
  const auto half = static_cast<int64_t>(frequencies.size());
  std::vector<double> c(static_cast<size_t>(positions * half)), s(c.size());
  for (int64_t t = 0; t < positions; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * frequencies[static_cast<size_t>(i)];
      c[static_cast<size_t>(t * half + i)] = std::cos(angle);
      s[static_cast<size_t>(t * half + i)] = std::sin(angle);
    }
  }
  return {tensor<double>(c, {positions, half}), tensor<double>(s, {positions, half})};
}

}  // namespace

std::vector<double> rotary_frequencies(int64_t head_dim, double base,
                                       const std::optional<RotaryScaling>& scaling) {
  NABLA_CHECK(head_dim >= 2 && head_dim % 2 == 0, "{}: the head size must be even and >= 2, got {}", kOp,
              head_dim);
  NABLA_CHECK(std::isfinite(base) && base > 0, "{}: base must be finite and > 0, got {}", kOp, base);
  std::vector<double> f(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  if (!scaling) return f;
  const RotaryScaling& r = *scaling;
  NABLA_CHECK(std::isfinite(r.factor) && r.factor > 0 && r.low_freq_factor > 0 &&
                  r.high_freq_factor > r.low_freq_factor && r.original_max_positions > 0,
              "{}: Llama 3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
              "original_max_positions > 0, got factor {}, low_freq_factor {}, high_freq_factor {}, "
              "original_max_positions {}",
              kOp, r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_positions);
  const auto L = static_cast<double>(r.original_max_positions);
  const double short_wave = L / r.high_freq_factor, long_wave = L / r.low_freq_factor;
  for (double& fi : f) {
    const double wavelength = 2 * std::numbers::pi / fi;
    if (wavelength < short_wave) continue;  // high frequencies: unchanged
    if (wavelength > long_wave) {           // low frequencies: slowed by the factor
      fi /= r.factor;
      continue;
    }
    const double s = (L / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    fi = (1 - s) * fi / r.factor + s * fi;
  }
  return f;
}

RotaryCache::RotaryCache(int64_t head_dim, int64_t max_positions, const RotaryCacheOptions& options)
    : head_dim_(head_dim), options_(options) {
  NABLA_CHECK(max_positions > 0, "RotaryCache: max_positions must be > 0, got {}", max_positions);
  frequencies_ = rotary_frequencies(head_dim, options.base, options.scaling);
  const auto [c, s] = host_tables(frequencies_, max_positions);
  cos_ = c.to(kFloat32).to(options.device);  // rounded on the host: half the bytes to copy
  sin_ = s.to(kFloat32).to(options.device);
  wide_ = std::make_shared<WideTables>();
}

void RotaryCache::check(const Tensor& x) const {
  NABLA_CHECK(defined(), "RotaryCache: the cache is empty (default-constructed)");
  check_input(x, head_dim_);
  NABLA_CHECK(x.device() == options_.device, "RotaryCache: the input is on {}, the tables on {}",
              x.device().str(), options_.device.str());
}

std::pair<const Tensor&, const Tensor&> RotaryCache::tables_for(const Tensor& x) const {
  if (x.dtype() != kFloat64) return {cos_, sin_};
  std::call_once(wide_->once, [&] {
    const auto [c, s] = host_tables(frequencies_, max_positions());
    wide_->cos = c.to(options_.device);
    wide_->sin = s.to(options_.device);
  });
  return {wide_->cos, wide_->sin};
}

Tensor RotaryCache::operator()(const Tensor& x, int64_t offset) const {
  check(x);
  NABLA_CHECK(offset >= 0 && offset + x.size(-2) <= max_positions(),
              "RotaryCache: positions {} .. {} are outside the table's 0 .. {} (max_positions {})", offset,
              offset + x.size(-2) - 1, max_positions() - 1, max_positions());
  const auto [c, s] = tables_for(x);
  return rotate(x, c, s, offset, options_.interleaved, false);
}

std::pair<Tensor, Tensor> RotaryCache::operator()(const Tensor& q, const Tensor& k, int64_t offset) const {
  return {(*this)(q, offset), (*this)(k, offset)};
}

std::pair<Tensor, Tensor> RotaryCache::rows_at(const Tensor& x, const Tensor& positions) const {
  check(x);
  ops::check_defined("RotaryCache", positions, "positions");
  NABLA_CHECK(positions.dtype() == kInt64 && positions.dim() == 1 && positions.size(0) == x.size(-2) &&
                  positions.device() == x.device(),
              "RotaryCache: expected int64 positions of shape ({}) on {}, one per row of {}, got {}",
              x.size(-2), x.device().str(), describe(x), describe(positions));
  if (positions.is_cpu()) {  // on CUDA, index_select checks them on the device
    for (int64_t p : positions.contiguous().to_vector<int64_t>()) {
      NABLA_CHECK(p >= 0 && p < max_positions(),
                  "RotaryCache: position {} is outside the table's 0 .. {} (max_positions {})", p,
                  max_positions() - 1, max_positions());
    }
  }
  const auto [c, s] = tables_for(x);
  return {index_select(c, 0, positions), index_select(s, 0, positions)};
}

Tensor RotaryCache::at(const Tensor& x, const Tensor& positions) const {
  const auto [c, s] = rows_at(x, positions);
  return rotate(x, c, s, 0, options_.interleaved, false);
}

std::pair<Tensor, Tensor> RotaryCache::at(const Tensor& q, const Tensor& k, const Tensor& positions) const {
  // The table rows are gathered once for both (rows 0 .. T-1 of them are the positions').
  const auto [c, s] = rows_at(q, positions);
  check(k);
  NABLA_CHECK(k.dtype() == q.dtype() && k.size(-2) == q.size(-2),
              "RotaryCache: q {} and k {} must have one dtype and as many rows", describe(q), describe(k));
  return {rotate(q, c, s, 0, options_.interleaved, false), rotate(k, c, s, 0, options_.interleaved, false)};
}

Tensor rotary_embedding(const Tensor& x, RotaryOptions options) {
  check_input(x, 0);
  NABLA_CHECK(options.base > 0 && std::isfinite(options.base) && options.offset >= 0,
              "{}: base must be finite and > 0 and offset >= 0, got base {} and offset {}", kOp, options.base,
              options.offset);
  // The tables of x's own positions, computed on its device in float64 (graph-capturable: no
  // host copy), then rounded to the dtype the kernel reads.
  const int64_t T = x.size(-2), D = x.size(-1), half = D / 2;
  const TensorOptions wide{.dtype = kFloat64, .device = x.device()};
  const Tensor frequency =
      exp(arange(static_cast<double>(half), wide) * (-2.0 * std::log(options.base) / static_cast<double>(D)));
  const Tensor position =
      arange(static_cast<double>(options.offset), static_cast<double>(options.offset + T), 1.0, wide);
  const Tensor angle = position.unsqueeze(1) * frequency.unsqueeze(0);  // (T, D/2)
  const DType table = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  return rotate(x, cos(angle).to(table), sin(angle).to(table), 0, options.interleaved, false);
}

}  // namespace nabla
