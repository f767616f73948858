// Tensor factories. Values are made where the tensor lives: CPU tensors by the CPU kernels,
// CUDA tensors by the CUDA kernels on the current stream (no host round trip, no sync).
//
// Kernels whose values depend on the element index (arange, the random draws) write a flat view
// of the fresh, dense tensor, so element i is the i-th element in memory: a channels_last
// tensor gets its values in NHWC order, and the same seed gives the same storage on every
// device.
#include "nabla/ops/factory.h"

#include <cmath>

#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/dispatch.h"

namespace nabla {

namespace {
// An uninitialized tensor of `options` that `make(t)` fills; requires_grad is set afterwards.
template <typename Make>
Tensor make_filled(const Shape& sizes, const TensorOptions& options, Make make) {
  TensorOptions o = options;
  o.requires_grad = false;
  Tensor t = Tensor::empty(sizes, o);
  make(t);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

// The elements of a fresh (dense) tensor as one contiguous row, in memory order.
Tensor flat_view(const Tensor& t) {
  return ops::alias(t, {t.numel()}, {1}, t.storage_offset());
}

void fill_on_device(const Tensor& t, double value) {
  ops::dispatch(
      "fill", t, [&] { ops::cpu::fill(t, value); }, [&] { ops::cuda::fill(t, value); });
}

void arange_on_device(const Tensor& t, double start, double step) {
  ops::dispatch(
      "arange", t, [&] { ops::cpu::arange(t, start, step); }, [&] { ops::cuda::arange(t, start, step); });
}
}  // namespace

Tensor empty(const Shape& sizes, const TensorOptions& options) {
  return Tensor::empty(sizes, options);
}

Tensor zeros(const Shape& sizes, const TensorOptions& options) {
  return full(sizes, 0.0, options);  // a memset on CUDA (see cuda::fill)
}

Tensor ones(const Shape& sizes, const TensorOptions& options) {
  return full(sizes, 1.0, options);
}

Tensor full(const Shape& sizes, double value, const TensorOptions& options) {
  return make_filled(sizes, options, [&](const Tensor& t) { fill_on_device(t, value); });
}

namespace {
TensorOptions like(const Tensor& t) {
  return {.dtype = t.dtype(), .device = t.device(), .memory_format = t.suggest_memory_format()};
}
}  // namespace

Tensor empty_like(const Tensor& t) {
  return empty(t.sizes(), like(t));
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.sizes(), like(t));
}
Tensor ones_like(const Tensor& t) {
  return full(t.sizes(), 1.0, like(t));
}
Tensor full_like(const Tensor& t, double value) {
  return full(t.sizes(), value, like(t));
}

Tensor arange(double end, const TensorOptions& options) {
  return arange(0.0, end, 1.0, options);
}

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  NABLA_CHECK(step != 0.0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end),
              "arange: start, end and step must be finite and step non-zero, got start={}, end={}, step={}",
              start, end, step);
  NABLA_CHECK((end - start) / step >= 0, "arange: step {} points away from end (start={}, end={})", step,
              start, end);
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  return make_filled({n}, options, [&](const Tensor& t) { arange_on_device(t, start, step); });
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options) {
  NABLA_CHECK(steps >= 0, "linspace: steps must be non-negative, got {}", steps);
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  return make_filled({steps}, options, [&](const Tensor& t) {
    arange_on_device(t, start, step);
    if (steps > 1) {
      // Pin the last value to `end` exactly, as PyTorch does, instead of start + (n-1)*step.
      fill_on_device(ops::alias(t, {1}, {1}, t.storage_offset() + steps - 1), end);
    }
  });
}

namespace {
Generator& pick(Generator* generator, Device device) {
  return generator ? *generator : default_generator(device);
}
// Counter blocks a random op uses: four 32-bit lanes per block; randint and doubles take two lanes.
uint64_t blocks_for(int64_t numel, int lanes_per_element) {
  return static_cast<uint64_t>((numel * lanes_per_element + 3) / 4);
}
}  // namespace

Tensor rand(const Shape& sizes, const TensorOptions& options, Generator* generator) {
  NABLA_CHECK(is_floating(options.dtype), "rand: expected a floating dtype, got {}",
              dtype_name(options.dtype));
  int lanes = options.dtype == kFloat64 ? 2 : 1;
  PhiloxState state =
      pick(generator, options.device).reserve(blocks_for(numel_of(sizes), lanes), options.device);
  return make_filled(sizes, options, [&](const Tensor& t) {
    return ops::dispatch(
        "uniform", t, [&] { return ops::cpu::uniform(flat_view(t), state, 0.0, 1.0); },
        [&] { return ops::cuda::uniform(flat_view(t), state, 0.0, 1.0); });
  });
}

Tensor randn(const Shape& sizes, const TensorOptions& options, Generator* generator) {
  NABLA_CHECK(is_floating(options.dtype), "randn: expected a floating dtype, got {}",
              dtype_name(options.dtype));
  PhiloxState state = pick(generator, options.device).reserve(blocks_for(numel_of(sizes), 1), options.device);
  return make_filled(sizes, options, [&](const Tensor& t) {
    return ops::dispatch(
        "normal", t, [&] { return ops::cpu::normal(flat_view(t), state, 0.0, 1.0); },
        [&] { return ops::cuda::normal(flat_view(t), state, 0.0, 1.0); });
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, const TensorOptions& options,
               Generator* generator) {
  NABLA_CHECK(low < high, "randint: expected low < high, got low={} and high={}", low, high);
  NABLA_CHECK(options.dtype != kBool, "randint: dtype bool is not supported");
  PhiloxState state = pick(generator, options.device).reserve(blocks_for(numel_of(sizes), 2), options.device);
  return make_filled(sizes, options, [&](const Tensor& t) {
    return ops::dispatch(
        "randint", t, [&] { return ops::cpu::randint(flat_view(t), state, low, high); },
        [&] { return ops::cuda::randint(flat_view(t), state, low, high); });
  });
}

Tensor bernoulli(const Shape& sizes, double p, const TensorOptions& options, Generator* generator) {
  NABLA_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: expected a probability p in [0, 1], got {}", p);
  PhiloxState state = pick(generator, options.device).reserve(blocks_for(numel_of(sizes), 1), options.device);
  return make_filled(sizes, options, [&](const Tensor& t) {
    return ops::dispatch(
        "bernoulli", t, [&] { return ops::cpu::bernoulli(flat_view(t), state, p); },
        [&] { return ops::cuda::bernoulli(flat_view(t), state, p); });
  });
}

}  // namespace nabla
