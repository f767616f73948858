// Tensor factories. Values are made on the CPU by the CPU kernels; for a CUDA tensor, zeros
// use a device memset and other values are made on the host and copied over (CUDA fill and
// random kernels come with the CUDA backend issue).
#include "nabla/ops/factory.h"

#include <cmath>

#include "nabla/core/cuda/runtime.h"
#include "nabla/ops/copy.h"
#include "nabla/ops/cpu/kernels.h"

namespace nabla {

namespace {
// Runs `make(cpu_tensor)` into a CPU tensor with `options`' dtype, then moves it to the device.
template <typename Make>
Tensor make_on_host(const Shape& sizes, const TensorOptions& options, Make make) {
  TensorOptions host = options;
  host.device = Device::cpu();
  host.requires_grad = false;
  Tensor t = Tensor::empty(sizes, host);
  make(t);
  if (options.device.is_cuda()) {
    Tensor d = Tensor::empty(
        sizes, {.dtype = options.dtype, .device = options.device, .memory_format = options.memory_format});
    copy_(d, t);
    t = d;
  }
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& sizes, const TensorOptions& options) {
  return Tensor::empty(sizes, options);
}

Tensor zeros(const Shape& sizes, const TensorOptions& options) {
  if (options.device.is_cuda()) {
    TensorOptions o = options;
    o.requires_grad = false;
    Tensor t = Tensor::empty(sizes, o);
    cuda::memset_zero(t.data_ptr(), t.device(), t.nbytes());
    if (options.requires_grad) t.requires_grad_(true);
    return t;
  }
  return full(sizes, 0.0, options);
}

Tensor ones(const Shape& sizes, const TensorOptions& options) {
  return full(sizes, 1.0, options);
}

Tensor full(const Shape& sizes, double value, const TensorOptions& options) {
  return make_on_host(sizes, options, [&](const Tensor& t) { ops::cpu::fill(t, value); });
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
  return make_on_host({n}, options, [&](const Tensor& t) { ops::cpu::arange(t, start, step); });
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options) {
  NABLA_CHECK(steps >= 0, "linspace: steps must be non-negative, got {}", steps);
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  return make_on_host({steps}, options, [&](const Tensor& t) {
    ops::cpu::arange(t, start, step);
    if (steps > 1) {
      // Pin the last value to `end` exactly, as PyTorch does, instead of start + (n-1)*step.
      Tensor last = t.narrow(0, steps - 1, 1);
      ops::cpu::fill(last, end);
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
  PhiloxState state = pick(generator, options.device).reserve(blocks_for(numel_of(sizes), lanes));
  return make_on_host(sizes, options, [&](const Tensor& t) { ops::cpu::uniform(t, state, 0.0, 1.0); });
}

Tensor randn(const Shape& sizes, const TensorOptions& options, Generator* generator) {
  NABLA_CHECK(is_floating(options.dtype), "randn: expected a floating dtype, got {}",
              dtype_name(options.dtype));
  PhiloxState state = pick(generator, options.device).reserve(blocks_for(numel_of(sizes), 1));
  return make_on_host(sizes, options, [&](const Tensor& t) { ops::cpu::normal(t, state, 0.0, 1.0); });
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, const TensorOptions& options,
               Generator* generator) {
  NABLA_CHECK(low < high, "randint: expected low < high, got low={} and high={}", low, high);
  NABLA_CHECK(options.dtype != kBool, "randint: dtype bool is not supported");
  PhiloxState state = pick(generator, options.device).reserve(blocks_for(numel_of(sizes), 2));
  return make_on_host(sizes, options, [&](const Tensor& t) { ops::cpu::randint(t, state, low, high); });
}

}  // namespace nabla
