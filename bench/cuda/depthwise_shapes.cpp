// Microbenchmark: every depthwise convolution of MobileNetV2 and EfficientNet-B0 (224x224) at
// float16 channels_last, forward + backward through nabla's public conv2d: nabla's stride-2
// data-gradient kernel where it applies (Note [Depthwise convolutions]), cuDNN in benchmark mode
// for the rest (the graph API's engines, Note [Grouped convolutions on the graph API]).
// bench/torch_depthwise_shapes.py times the same table in PyTorch.
//
//   ./build/cuda/bench/nabla_bench_depthwise [batch, default 256] [runs, default 20]
//
// Each row: medians of `runs` CUDA-event-timed iterations after 3 warm-ups. "ms" is the public
// op, forward + backward through autograd (allocations included), as the PyTorch script
// measures; then cuDNN's three directions alone on preallocated outputs, and nabla's
// data-gradient kernel where it applies (against cuDNN's "cd data"). The totals weight each shape
// by how often the network uses it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "../timing.h"
#include "nabla/nabla.h"
#include "nabla/ops/cuda/conv/bn_kernels.h"
#include "nabla/ops/cuda/conv/kernels.h"

namespace {

using nabla::Tensor;

struct DepthwiseShape {
  const char* net;
  int64_t c, h, k, stride, count;
};

// Same table, same order as bench/torch_depthwise_shapes.py.
const std::vector<DepthwiseShape> kShapes = {
    {"mobilenet_v2", 32, 112, 3, 1, 1},    {"mobilenet_v2", 96, 112, 3, 2, 1},
    {"mobilenet_v2", 144, 56, 3, 1, 1},    {"mobilenet_v2", 144, 56, 3, 2, 1},
    {"mobilenet_v2", 192, 28, 3, 1, 2},    {"mobilenet_v2", 192, 28, 3, 2, 1},
    {"mobilenet_v2", 384, 14, 3, 1, 4},    {"mobilenet_v2", 576, 14, 3, 1, 2},
    {"mobilenet_v2", 576, 14, 3, 2, 1},    {"mobilenet_v2", 960, 7, 3, 1, 3},
    {"efficientnet_b0", 32, 112, 3, 1, 1}, {"efficientnet_b0", 96, 112, 3, 2, 1},
    {"efficientnet_b0", 144, 56, 3, 1, 1}, {"efficientnet_b0", 144, 56, 5, 2, 1},
    {"efficientnet_b0", 240, 28, 5, 1, 1}, {"efficientnet_b0", 240, 28, 3, 2, 1},
    {"efficientnet_b0", 480, 14, 3, 1, 2}, {"efficientnet_b0", 480, 14, 5, 1, 1},
    {"efficientnet_b0", 672, 14, 5, 1, 2}, {"efficientnet_b0", 672, 14, 5, 2, 1},
    {"efficientnet_b0", 1152, 7, 5, 1, 3}, {"efficientnet_b0", 1152, 7, 3, 1, 1},
};

using nabla::bench::median_ms;

}  // namespace

int main(int argc, char** argv) {
  if (!nabla::cuda::is_available()) {
    std::fprintf(stderr, "nabla_bench_depthwise: no CUDA device\n");
    return 1;
  }
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256;
  const int runs = argc > 2 ? std::max(10, std::atoi(argv[2])) : 20;
  const int warmup = 3;
  const nabla::Routes routes{.cudnn_benchmark = true};
  const nabla::RoutesGuard routes_guard(routes);
  const nabla::TensorOptions half{.dtype = nabla::kFloat16, .device = nabla::Device::cuda()};
  constexpr auto kCl = nabla::MemoryFormat::ChannelsLast;

  std::printf("nabla depthwise conv2d, batch %lld, float16 channels_last, fwd+bwd, median of %d runs\n",
              static_cast<long long>(batch), runs);
  std::printf("%-16s %-18s %4s %9s %8s %8s %8s %8s\n", "net", "shape", "uses", "ms", "cd fwd", "cd data",
              "cd filt", "our data");
  const char* net = nullptr;
  double ours_net = 0;
  const auto total = [&] {
    if (net != nullptr) std::printf("%-16s weighted by use: %.3f ms\n", net, ours_net);
  };
  for (const DepthwiseShape& s : kShapes) {
    if (net == nullptr || std::string_view(net) != s.net) {
      total();
      net = s.net;
      ours_net = 0;
    }
    const int64_t pad = s.k / 2, out = (s.h + 2 * pad - s.k) / s.stride + 1;
    Tensor x = nabla::randn({batch, s.c, s.h, s.h}, half).contiguous(kCl).requires_grad_(true);
    Tensor w =
        (nabla::randn({s.c, 1, s.k, s.k}, half) * (1.0 / double(s.k))).contiguous(kCl).requires_grad_(true);
    Tensor gy = nabla::randn({batch, s.c, out, out}, half).contiguous(kCl);
    const nabla::Conv2dOptions options{.stride = s.stride, .padding = pad, .groups = s.c};
    const auto step = [&] {
      x.set_grad(Tensor());
      w.set_grad(Tensor());
      nabla::conv2d(x, w, {}, options).backward(gy);
    };
    const double ours = median_ms(step, runs, warmup);

    namespace kernels = nabla::ops::cuda;
    const nabla::ops::ConvParams params{.stride = {s.stride, s.stride}, .padding = {pad, pad}, .groups = s.c};
    Tensor y =
        nabla::empty(gy.sizes(), {.dtype = nabla::kFloat16, .device = gy.device(), .memory_format = kCl});
    Tensor gx =
        nabla::empty(x.sizes(), {.dtype = nabla::kFloat16, .device = x.device(), .memory_format = kCl});
    Tensor gw =
        nabla::empty(w.sizes(), {.dtype = nabla::kFloat16, .device = w.device(), .memory_format = kCl});
    const auto graph = [&](kernels::ConvDirection d, const Tensor& a, const Tensor& b, const Tensor& c) {
      return median_ms([&] { kernels::conv2d_graph(d, a, b, c, params, routes); }, runs, warmup);
    };
    const double cd_fwd = graph(kernels::ConvDirection::Forward, x, w, y);
    const double cd_data = graph(kernels::ConvDirection::BackwardData, gx, w, gy);
    const double cd_filter = graph(kernels::ConvDirection::BackwardWeight, x, gw, gy);
    char our_data[16] = "-";
    if (kernels::depthwise_conv2d_backward_input_supported(gx, w, gy, params)) {
      std::snprintf(
          our_data, sizeof(our_data), "%.3f",
          median_ms([&] { kernels::depthwise_conv2d_backward_input(gy, w, gx, params); }, runs, warmup));
    }
    char shape[48];
    std::snprintf(shape, sizeof(shape), "%lldx%lld %lld k%lld/%lld", static_cast<long long>(s.h),
                  static_cast<long long>(s.h), static_cast<long long>(s.c), static_cast<long long>(s.k),
                  static_cast<long long>(s.stride));
    std::printf("%-16s %-18s %4lld %9.3f %8.3f %8.3f %8.3f %8s\n", s.net, shape,
                static_cast<long long>(s.count), ours, cd_fwd, cd_data, cd_filter, our_data);
    ours_net += ours * double(s.count);
  }
  total();
  return 0;
}
