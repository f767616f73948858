// Public header. Tensor factories.
//
//   auto x = nabla::randn({64, 3, 32, 32}, {.device = nabla::Device::cuda()});
//   auto i = nabla::arange(10, {.dtype = nabla::kInt64});
//   auto v = nabla::tensor<float>({1, 2, 3, 4}, {2, 2});
#pragma once

#include <optional>
#include <vector>

#include "nabla/core/generator.h"
#include "nabla/core/tensor.h"

namespace nabla {

Tensor empty(const Shape& sizes, const TensorOptions& options = {});
Tensor zeros(const Shape& sizes, const TensorOptions& options = {});
Tensor ones(const Shape& sizes, const TensorOptions& options = {});
Tensor full(const Shape& sizes, double value, const TensorOptions& options = {});

// The *_like factories copy dtype, device and memory format (not requires_grad).
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// [0, end) and [start, end) in steps of `step`.
Tensor arange(double end, const TensorOptions& options = {});
Tensor arange(double start, double end, double step = 1.0, const TensorOptions& options = {});
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options = {});

// Random factories draw from `generator`, or the device's default generator when null.
Tensor rand(const Shape& sizes, const TensorOptions& options = {},
            Generator* generator = nullptr);  // U[0, 1)
Tensor randn(const Shape& sizes, const TensorOptions& options = {},
             Generator* generator = nullptr);  // N(0, 1)
// Integers uniform in [low, high); int64 unless options say otherwise.
Tensor randint(int64_t low, int64_t high, const Shape& sizes,
               const TensorOptions& options = {.dtype = kInt64}, Generator* generator = nullptr);
// 1 with probability p, else 0, in the options' dtype (bool gives true/false): dropout masks.
//   auto keep = nabla::bernoulli(x.sizes(), 0.9, {.dtype = x.dtype(), .device = x.device()});
Tensor bernoulli(const Shape& sizes, double p, const TensorOptions& options = {},
                 Generator* generator = nullptr);

// Wraps memory the caller owns (nabla never frees it).
inline Tensor from_blob(void* data, const Shape& sizes, const TensorOptions& options = {}) {
  return Tensor::from_blob(data, sizes, options);
}

// Copies `values` into a new tensor. `sizes` defaults to 1-d; dtype defaults to T's.
template <typename T>
Tensor tensor(const std::vector<T>& values, const Shape& sizes = {},
              std::optional<TensorOptions> options = std::nullopt) {
  Shape shape = sizes.empty() ? Shape{static_cast<int64_t>(values.size())} : sizes;
  NABLA_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()),
              "tensor: {} values do not fill shape {}", values.size(), shape_str(shape));
  TensorOptions opts = options.value_or(TensorOptions{.dtype = dtype_v<T>});
  // Build on the CPU in T's own dtype, then convert and move as asked.
  Tensor host = Tensor::empty(shape, {.dtype = dtype_v<T>});
  std::copy(values.begin(), values.end(), host.data_ptr<T>());
  Tensor out = host.to(opts.device, opts.dtype);
  if (opts.requires_grad) out.requires_grad_(true);
  return out;
}
template <typename T>
Tensor tensor(std::initializer_list<T> values, const Shape& sizes = {},
              std::optional<TensorOptions> options = std::nullopt) {
  return tensor(std::vector<T>(values), sizes, options);
}

}  // namespace nabla
