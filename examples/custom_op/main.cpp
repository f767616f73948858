// Runs the custom CUDA op against the same function composed from nabla's CPU ops in float64:
// values and gradients must agree. Exits 0 with "no CUDA device" on a machine without a GPU.
#include <nabla/nabla.h>

#include <cstdio>

#include "scaled_tanh.h"

namespace nb = nabla;

// The kernels as a differentiable op: forward and backward each launch one kernel.
struct ScaledTanhCuda : nabla::autograd::Function<ScaledTanhCuda> {
  static nabla::Tensor forward(nabla::autograd::Context& ctx, const nabla::Tensor& x, double alpha) {
    NABLA_CHECK(alpha != 0,
                "ScaledTanhCuda: alpha must be non-zero (backward recovers tanh(x) as y / alpha)");
    nabla::Tensor xc = x.contiguous();
    nabla::Tensor y = nabla::Tensor::empty(x.sizes(), x.options());
    scaled_tanh_forward(xc, alpha, y);
    ctx.save_for_backward({y});  // the output is all backward needs
    ctx.saved_data["alpha"] = alpha;
    return y;
  }
  static nabla::TensorList backward(nabla::autograd::Context& ctx, const nabla::TensorList& grads) {
    const nabla::Tensor& y = ctx.saved()[0];
    nabla::Tensor grad_x = nabla::Tensor::empty(y.sizes(), y.options());
    scaled_tanh_backward(grads[0].contiguous(), y, ctx.saved_data["alpha"].to_double(), grad_x);
    return {grad_x};
  }
};

int main() {
  if (!nb::cuda::is_available()) {
    std::puts("no CUDA device");
    return 0;
  }
  const double alpha = 1.7;
  nb::Generator gen(1234);
  nb::Tensor x_cpu = nb::randn({64, 33}, {.dtype = nb::kFloat32}, &gen);
  nb::Tensor w_cpu = nb::randn({64, 33}, {.dtype = nb::kFloat32}, &gen);

  // The custom op on the GPU.
  nb::Tensor x = x_cpu.to(nb::Device::cuda()).requires_grad_(true);
  nb::Tensor y = ScaledTanhCuda::apply(x, alpha);
  (y * w_cpu.to(nb::Device::cuda())).sum().backward();

  // The reference: built-in ops on the CPU, in float64.
  nb::Tensor xr = x_cpu.to(nb::kFloat64).requires_grad_(true);
  nb::Tensor yr = nb::tanh(xr) * alpha;
  (yr * w_cpu.to(nb::kFloat64)).sum().backward();

  auto max_diff = [](const nb::Tensor& a, const nb::Tensor& b) {
    return nb::max((a.to(nb::Device::cpu(), nb::kFloat64) - b.detach()).abs()).item<double>();
  };
  const double dy = max_diff(y.detach(), yr), dx = max_diff(x.grad(), xr.grad());
  std::printf("max |y - y_ref| = %.3g, max |dx - dx_ref| = %.3g\n", dy, dx);
  if (dy > 1e-5 || dx > 1e-5) {
    std::puts("FAILED: the custom op disagrees with the reference");
    return 1;
  }
  std::puts("ok");
  return 0;
}
