// Microbenchmark: every distinct convolution of ResNet-50 (torchvision v1.5, 224x224) through
// nabla's public conv2d, float16 (or bfloat16) channels_last, cuDNN benchmark mode, timed as
// forward + backward (grad_input and grad_weight, no bias). bench/torch_conv_shapes.py runs the
// same shapes through PyTorch and prints the same table, so the two can be compared line by line.
//
//   ./build/cuda/bench/nabla_bench_conv [batch, default 256] [runs, default 20] [fp16|bf16]
//
// Each row: median of `runs` iterations timed with CUDA events on the current stream, after 3
// warm-ups (the first runs cudnnFind*). "ms" and TFLOP/s are the public op, forward + backward
// through autograd (allocations included), as the PyTorch script measures; TFLOP/s counts 3
// convolutions of 2 N O C kH kW Ho Wo flops each. The fwd / data / filter columns time the CUDA
// entry points alone on preallocated outputs, to show where the time goes (not in the sums), on
// the default routes with benchmark mode (Note [Convolutions on the graph API] in
// ops/cuda/conv/conv.cpp). The last row weights each shape by how often ResNet-50 uses it (53
// convolutions).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "nabla/core/cuda/stream.h"
#include "nabla/nabla.h"
#include "nabla/ops/cuda/conv/kernels.h"
#include "timing.h"

namespace {

using nabla::Tensor;

struct ConvShape {
  const char* name;
  int64_t c, h, o, k, stride, padding, count;
};

// Same table, same order as bench/torch_conv_shapes.py.
const std::vector<ConvShape> kShapes = {
    {"stem 7x7/2", 3, 224, 64, 7, 2, 3, 1},
    {"l1 1x1 64>64", 64, 56, 64, 1, 1, 0, 1},
    {"l1 3x3 64", 64, 56, 64, 3, 1, 1, 3},
    {"l1 1x1 64>256 (+down)", 64, 56, 256, 1, 1, 0, 4},
    {"l1 1x1 256>64", 256, 56, 64, 1, 1, 0, 2},
    {"l2 1x1 256>128", 256, 56, 128, 1, 1, 0, 1},
    {"l2 3x3/2 128", 128, 56, 128, 3, 2, 1, 1},
    {"l2 1x1 128>512", 128, 28, 512, 1, 1, 0, 4},
    {"l2 down 1x1/2 256>512", 256, 56, 512, 1, 2, 0, 1},
    {"l2 1x1 512>128", 512, 28, 128, 1, 1, 0, 3},
    {"l2 3x3 128", 128, 28, 128, 3, 1, 1, 3},
    {"l3 1x1 512>256", 512, 28, 256, 1, 1, 0, 1},
    {"l3 3x3/2 256", 256, 28, 256, 3, 2, 1, 1},
    {"l3 1x1 256>1024", 256, 14, 1024, 1, 1, 0, 6},
    {"l3 down 1x1/2 512>1024", 512, 28, 1024, 1, 2, 0, 1},
    {"l3 1x1 1024>256", 1024, 14, 256, 1, 1, 0, 5},
    {"l3 3x3 256", 256, 14, 256, 3, 1, 1, 5},
    {"l4 1x1 1024>512", 1024, 14, 512, 1, 1, 0, 1},
    {"l4 3x3/2 512", 512, 14, 512, 3, 2, 1, 1},
    {"l4 1x1 512>2048", 512, 7, 2048, 1, 1, 0, 3},
    {"l4 down 1x1/2 1024>2048", 1024, 14, 2048, 1, 2, 0, 1},
    {"l4 1x1 2048>512", 2048, 7, 512, 1, 1, 0, 2},
    {"l4 3x3 512", 512, 7, 512, 3, 1, 1, 2},
};

using nabla::bench::median_ms;

}  // namespace

int main(int argc, char** argv) {
  if (!nabla::cuda::is_available()) {
    std::fprintf(stderr, "nabla_bench_conv: no CUDA device\n");
    return 1;
  }
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256;
  const int runs = argc > 2 ? std::max(10, std::atoi(argv[2])) : 20;
  const int warmup = 3;
  const bool bf16 = argc > 3 && std::string(argv[3]) == "bf16";
  const nabla::DType dtype = bf16 ? nabla::kBFloat16 : nabla::kFloat16;
  const nabla::Routes routes{.cudnn_benchmark = true};
  const nabla::RoutesGuard routes_guard(routes);
  const nabla::TensorOptions half{.dtype = dtype, .device = nabla::Device::cuda()};
  constexpr auto kCl = nabla::MemoryFormat::ChannelsLast;

  std::printf(
      "nabla conv2d, ResNet-50 shapes, batch %lld, %s channels_last, cudnn benchmark, fwd+bwd, "
      "median of %d runs\n",
      static_cast<long long>(batch), bf16 ? "bfloat16" : "float16", runs);
  std::printf("%-24s %-26s %5s %10s %9s %8s %8s %8s\n", "conv", "input -> output", "uses", "ms", "TFLOP/s",
              "fwd", "data", "filter");
  double total = 0, network = 0, columns[3] = {};
  for (const ConvShape& s : kShapes) {
    const int64_t out = (s.h + 2 * s.padding - s.k) / s.stride + 1;
    Tensor x = nabla::randn({batch, s.c, s.h, s.h}, half).contiguous(kCl).requires_grad_(true);
    Tensor w = (nabla::randn({s.o, s.c, s.k, s.k}, half) * (1.0 / std::sqrt(double(s.c * s.k * s.k))))
                   .contiguous(kCl)
                   .requires_grad_(true);
    Tensor gy = nabla::randn({batch, s.o, out, out}, half).contiguous(kCl);
    const nabla::Conv2dOptions options{.stride = s.stride, .padding = s.padding};
    const double ms = median_ms(
        [&] {
          x.set_grad(Tensor());
          w.set_grad(Tensor());
          Tensor y = nabla::conv2d(x, w, {}, options);
          y.backward(gy);
        },
        runs, warmup);
    // The three kernels alone, on preallocated outputs.
    namespace kernels = nabla::ops::cuda;
    const nabla::ops::ConvParams params{.stride = {s.stride, s.stride}, .padding = {s.padding, s.padding}};
    Tensor y = nabla::empty(gy.sizes(), {.dtype = dtype, .device = gy.device(), .memory_format = kCl});
    Tensor gx = nabla::empty(x.sizes(), {.dtype = dtype, .device = x.device(), .memory_format = kCl});
    Tensor gw = nabla::empty(w.sizes(), {.dtype = dtype, .device = w.device(), .memory_format = kCl});
    const double t[3] = {
        median_ms([&] { kernels::conv2d_forward(x, w, {}, y, params, routes); }, runs, warmup),
        median_ms([&] { kernels::conv2d_backward_input(gy, w, gx, params, routes); }, runs, warmup),
        median_ms([&] { kernels::conv2d_backward_weight(gy, x, gw, params, routes); }, runs, warmup)};
    const double flops = 3.0 * 2.0 * double(batch * s.o * s.c * s.k * s.k * out * out);
    char shape[64];
    std::snprintf(shape, sizeof(shape), "%lldx%lld %lld -> %lld k%lld/%lld", static_cast<long long>(s.h),
                  static_cast<long long>(s.h), static_cast<long long>(s.c), static_cast<long long>(s.o),
                  static_cast<long long>(s.k), static_cast<long long>(s.stride));
    std::printf("%-24s %-26s %5lld %10.3f %9.1f", s.name, shape, static_cast<long long>(s.count), ms,
                flops / (ms * 1e9));
    for (int c = 0; c < 3; ++c) {
      std::printf(" %8.3f", t[c]);
      columns[c] += t[c] * double(s.count);
    }
    std::printf("\n");
    std::fflush(stdout);
    total += ms;
    network += ms * double(s.count);
  }
  std::printf("sum over the %zu shapes: %.3f ms; ResNet-50 convolutions (weighted by use): %.3f ms\n",
              kShapes.size(), total, network);
  std::printf("weighted by use, ms: fwd %.3f data %.3f filter %.3f\n", columns[0], columns[1], columns[2]);
  return 0;
}
