// Microbenchmark: training batch norm + ReLU at ResNet-50's shapes (batch 256), forward and
// backward, on nabla's kernels, the route every float32, float16 and bfloat16 training batch norm
// takes (Note [cuDNN batch norm]). It says how far they are from the device's bandwidth, shape by
// shape.
//
//   ./build/cuda/bench/nabla_bench_batch_norm [nchw|channels-last, default channels-last] [runs, default 30]
//
// Each cell is the median of CUDA-event-timed calls after warm-up, on preallocated tensors.
// GB/s counts the bytes nabla's kernels must move: forward reads x twice (statistics, then the
// normalizing pass) and writes y; backward reads dy, x and y twice (the sums, then dx) and writes
// dx. "x-mask" is nabla's backward with the ReLU's mask recomputed from x (Note [The ReLU's mask
// from x] in batch_norm/batch_norm.cu), which reads two activations where the other reads three; its GB/s
// counts the seven passes too, so it shows as the gain.
// The last rows weigh each shape by how many fused BN + ReLU layers ResNet-50 has at it: the
// batch-norm share of one training step, per dtype.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../timing.h"
#include "nabla/nabla.h"
#include "nabla/ops/cuda/batch_norm/kernels.h"

namespace {

using nabla::DType;
using nabla::MemoryFormat;
using nabla::Tensor;
namespace kernels = nabla::ops::cuda;

struct LayerShape {
  int64_t channels, side;
  int layers;  // fused BN + ReLU layers of ResNet-50 at this shape (residual adds included)
};

// torchvision's ResNet-50 (stride in the 3x3 convolution), its BN + ReLU layers by shape.
constexpr LayerShape kShapes[] = {{64, 112, 1},  {64, 56, 6},  {256, 56, 3}, {128, 56, 1},
                                  {128, 28, 7},  {512, 28, 4}, {256, 28, 1}, {256, 14, 11},
                                  {1024, 14, 6}, {512, 14, 1}, {512, 7, 5},  {2048, 7, 3}};
constexpr int64_t kBatch = 256;
constexpr double kEps = 1e-5;

struct Times {
  double forward = 0, backward = 0, backward_from_x = 0;  // ms
};

struct Buffers {
  Tensor x, y, dy, dx, w, b, mean, invstd, running_mean, running_var, dw, db;
};

Buffers make_buffers(const LayerShape& s, DType dtype, MemoryFormat format) {
  const nabla::Device gpu = nabla::Device::cuda();
  const nabla::TensorOptions data{.dtype = dtype, .device = gpu};
  const nabla::TensorOptions params{.dtype = nabla::kFloat32, .device = gpu};
  const nabla::Shape shape = {kBatch, s.channels, s.side, s.side};
  Buffers b;
  b.x = nabla::randn(shape, data).contiguous(format);
  b.dy = nabla::randn(shape, data).contiguous(format);
  b.y = nabla::empty_like(b.x);
  b.dx = nabla::empty_like(b.x);
  b.w = nabla::rand({s.channels}, params) + 0.5;
  b.b = nabla::randn({s.channels}, params);
  b.running_mean = nabla::zeros({s.channels}, params);
  b.running_var = nabla::ones({s.channels}, params);
  b.mean = nabla::empty({s.channels}, params);
  b.invstd = nabla::empty({s.channels}, params);
  b.dw = nabla::empty({s.channels}, params);
  b.db = nabla::empty({s.channels}, params);
  return b;
}

// nabla's kernels: the fused BN + ReLU forward, and its backward reading the ReLU's mask from y
// or recomputing it from x.
Times time_kernels(Buffers& b, int runs) {
  const nabla::ops::BatchNormInputs in{b.x, b.w, b.b, b.running_mean, b.running_var};
  const nabla::ops::BatchNormStats stats{b.mean, b.invstd};
  const nabla::ops::BatchNormGrads grads{.dx = b.dx, .dresidual = Tensor(), .dweight = b.dw, .dbias = b.db};
  const auto forward = [&] {
    kernels::batch_norm_forward_kernel(in, b.y, stats, 0.1, kEps, Tensor(), /*relu=*/true);
  };
  const auto backward = [&](const Tensor& relu_y, const kernels::ReluMaskFromX& mask) {
    kernels::batch_norm_backward_kernel(b.dy, b.x, b.w, stats, grads, relu_y, mask);
  };
  Times t;
  t.forward = nabla::bench::median_ms(forward, runs, 3);
  t.backward = nabla::bench::median_ms([&] { backward(b.y, {}); }, runs, 3);
  t.backward_from_x = nabla::bench::median_ms([&] { backward({}, {.on = true, .bias = b.b}); }, runs, 3);
  return t;
}

double gbps(double bytes, double ms) {
  return bytes / (ms * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  if (!nabla::cuda::is_available()) {
    std::fprintf(stderr, "nabla_bench_batch_norm: no CUDA device\n");
    return 1;
  }
  const std::string layout = argc > 1 ? argv[1] : "channels-last";
  if (layout != "nchw" && layout != "channels-last") {
    std::fprintf(stderr, "nabla_bench_batch_norm: layout must be nchw or channels-last, got '%s'\n",
                 layout.c_str());
    return 2;
  }
  const MemoryFormat format = layout == "nchw" ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
  const int runs = argc > 2 ? std::max(5, std::atoi(argv[2])) : 30;

  std::printf(
      "batch norm + ReLU, training, batch %lld, %s, median of %d runs (us; GB/s of the kernels' traffic)\n",
      static_cast<long long>(kBatch), layout.c_str(), runs);
  std::printf("%-9s %-12s | %7s %7s %7s | %6s %6s %6s\n", "dtype", "shape", "fwd", "bwd", "x-mask", "fGB/s",
              "bGB/s", "xGB/s");
  for (DType dtype : {nabla::kFloat32, nabla::kFloat16, nabla::kBFloat16}) {
    Times total;
    for (const LayerShape& s : kShapes) {
      Buffers b = make_buffers(s, dtype, format);
      const double elems = static_cast<double>(b.x.numel());
      const double es = static_cast<double>(nabla::itemsize(dtype));
      const double fwd_bytes = 3 * elems * es, bwd_bytes = 7 * elems * es;
      const Times k = time_kernels(b, runs);
      total.forward += s.layers * k.forward;
      total.backward += s.layers * k.backward;
      total.backward_from_x += s.layers * k.backward_from_x;
      const std::string shape =
          std::to_string(s.channels) + "x" + std::to_string(s.side) + "x" + std::to_string(s.side);
      std::printf("%-9s %-12s | %7.1f %7.1f %7.1f | %6.0f %6.0f %6.0f\n",
                  std::string(nabla::dtype_name(dtype)).c_str(), shape.c_str(), k.forward * 1e3,
                  k.backward * 1e3, k.backward_from_x * 1e3, gbps(fwd_bytes, k.forward),
                  gbps(bwd_bytes, k.backward), gbps(bwd_bytes, k.backward_from_x));
    }
    std::printf("%-9s weighted total, ms per ResNet-50 step: fwd %.2f, bwd %.2f, x-mask %.2f\n",
                std::string(nabla::dtype_name(dtype)).c_str(), total.forward, total.backward,
                total.backward_from_x);
  }
  return 0;
}
