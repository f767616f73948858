// Microbenchmark: ResNet-50's convolutions (batch 256, channels_last float16) with the batch-norm
// work fused into them on cuDNN's runtime-fusion engines (Note [Convolution + batch norm fusion]
// in ops/cuda/conv/bn_fused.cpp), against the plain convolutions nabla runs today. Per shape:
// whether cuDNN offers an engine for each pattern, the largest relative error against the same
// computation composed from unfused ops, and the median time.
//
//   ./build/cuda/bench/nabla_bench_conv_bn_fusion [runs, default 20] [fp16|bf16, default fp16]
//
// bf16 asks whether cuDNN's engines take the same patterns in bfloat16 (the library fuses float16
// only; h:* columns then use bfloat16 scale and bias).
//
// Columns (us): fwd = the plain convolution (cuDNN's legacy API, or cuBLASLt for 1x1 stride 1);
// +st = conv + per-channel sums of y and y^2; p+st = the same with the previous batch norm's
// scale-bias-ReLU (float32 scale and bias) applied in the load; dgrad; dg+m = dgrad masked by
// that ReLU; dg+bn = dgrad masked by a batch norm + ReLU recomputed from x, with that batch
// norm's backward reductions; wgrad; p+wg = wgrad recomputing the scale-bias-ReLU in the load;
// h:p+st and h:p+wg = p+st and p+wg with float16 scale and bias (the form the library uses).
// The last row weighs each shape by its count.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../timing.h"
#include "nabla/nabla.h"
#include "nabla/ops/cuda/conv/bn_kernels.h"

namespace {

using nabla::Tensor;
namespace k = nabla::ops::cuda;

struct ConvShape {
  int64_t in, out, kernel, stride, side;  // side: input height = width
  bool prologue;                          // the input is a batch norm + ReLU's output
  int count;                              // convolutions of ResNet-50 at this shape
};

// torchvision's ResNet-50 (stride in the 3x3 convolution), the first 7x7 convolution left out
// (3 input channels).
constexpr ConvShape kShapes[] = {
    {64, 64, 1, 1, 56, false, 1},    {64, 64, 3, 1, 56, true, 3},    {64, 256, 1, 1, 56, true, 3},
    {64, 256, 1, 1, 56, false, 1},   {256, 64, 1, 1, 56, false, 2},  {256, 128, 1, 1, 56, false, 1},
    {128, 128, 3, 2, 56, true, 1},   {128, 512, 1, 1, 28, true, 4},  {256, 512, 1, 2, 56, false, 1},
    {512, 128, 1, 1, 28, false, 3},  {128, 128, 3, 1, 28, true, 3},  {512, 256, 1, 1, 28, false, 1},
    {256, 256, 3, 2, 28, true, 1},   {256, 1024, 1, 1, 14, true, 6}, {512, 1024, 1, 2, 28, false, 1},
    {1024, 256, 1, 1, 14, false, 5}, {256, 256, 3, 1, 14, true, 5},  {1024, 512, 1, 1, 14, false, 1},
    {512, 512, 3, 2, 14, true, 1},   {512, 2048, 1, 1, 7, true, 3},  {1024, 2048, 1, 2, 14, false, 1},
    {2048, 512, 1, 1, 7, false, 2},  {512, 512, 3, 1, 7, true, 2},
};
constexpr int64_t kBatch = 256;

double rel_error(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(nabla::kFloat32), w = want.to(nabla::kFloat32);
  return nabla::norm(nabla::sub(g, w)).item<float>() / std::max(1e-30f, nabla::norm(w).item<float>());
}

constexpr int kColumns = 10;
const char* const kNames[kColumns] = {"fwd",   "+st",   "p+st", "dgrad",  "dg+m",
                                      "dg+bn", "wgrad", "p+wg", "h:p+st", "h:p+wg"};

}  // namespace

int main(int argc, char** argv) {
  if (!nabla::cuda::is_available()) {
    std::fprintf(stderr, "nabla_bench_conv_bn_fusion: no CUDA device\n");
    return 1;
  }
  const int runs = argc > 1 ? std::max(5, std::atoi(argv[1])) : 20;
  const nabla::Routes routes{.cudnn_benchmark = true};
  const nabla::RoutesGuard routes_guard(routes);
  const nabla::Device gpu = nabla::Device::cuda();
  const nabla::DType dtype = argc > 2 && std::string(argv[2]) == "bf16" ? nabla::kBFloat16 : nabla::kFloat16;
  const nabla::TensorOptions half{.dtype = dtype, .device = gpu};
  const nabla::TensorOptions f32{.dtype = nabla::kFloat32, .device = gpu};
  const auto cl = [](Tensor t) { return t.contiguous(nabla::MemoryFormat::ChannelsLast); };

  std::printf(
      "ResNet-50 convolutions, batch %lld, %.*s channels_last, median of %d runs (us); "
      "'-' = no engine\n",
      static_cast<long long>(kBatch), static_cast<int>(nabla::dtype_name(dtype).size()),
      nabla::dtype_name(dtype).data(), runs);
  std::printf("%-22s %3s", "shape (in>out k s side)", "n");
  for (const char* n : kNames) std::printf(" %8s", n);
  std::printf("  max rel err (st, p+st, dg+m[/sums], p+wg, h:p+st)\n");
  double total[kColumns] = {};
  bool all[kColumns];
  std::fill(all, all + kColumns, true);
  for (const ConvShape& s : kShapes) {
    const int64_t pad = s.kernel / 2, out_side = (s.side + 2 * pad - s.kernel) / s.stride + 1;
    const nabla::ops::ConvParams p{.stride = {s.stride, s.stride}, .padding = {pad, pad}};
    const nabla::Conv2dOptions opts{.stride = s.stride, .padding = pad};
    Tensor x = cl(nabla::randn({kBatch, s.in, s.side, s.side}, half));
    Tensor w = cl(nabla::mul(nabla::randn({s.out, s.in, s.kernel, s.kernel}, half),
                             1.0 / std::sqrt(static_cast<double>(s.in * s.kernel * s.kernel))));
    Tensor y = cl(nabla::empty({kBatch, s.out, out_side, out_side}, half));
    Tensor dy = cl(nabla::randn({kBatch, s.out, out_side, out_side}, half));
    Tensor dx = nabla::empty_like(x), dw = nabla::empty_like(w);
    Tensor sum = nabla::zeros({s.out}, f32), sqsum = nabla::zeros({s.out}, f32);
    Tensor gsum = nabla::zeros({s.in}, f32), gxsum = nabla::zeros({s.in}, f32);
    const k::AffineRelu pro{.scale = nabla::rand({s.in}, f32) + 0.5, .bias = nabla::randn({s.in}, f32) * 0.5};
    const k::AffineRelu none{};
    // The references: the prologue composed from ops, in float32, rounded to float16 as the
    // fused load rounds it.
    const Tensor scale4 = pro.scale.reshape({1, s.in, 1, 1}), bias4 = pro.bias.reshape({1, s.in, 1, 1});
    const Tensor act =
        cl(nabla::relu(nabla::add(nabla::mul(x.to(nabla::kFloat32), scale4), bias4)).to(dtype));

    double t[kColumns];
    bool ok[kColumns];
    std::string err;
    const auto time = [&](int col, auto&& call) {
      std::string why;
      ok[col] = call(&why);
      if (!ok[col]) {
        if (why.size() > 160) why.resize(160);
        std::fprintf(stderr, "  %s %lld>%lld k%lld s%lld @%lld: %s\n", kNames[col], (long long)s.in,
                     (long long)s.out, (long long)s.kernel, (long long)s.stride, (long long)s.side,
                     why.c_str());
        return;
      }
      t[col] = nabla::bench::median_ms([&] { call(nullptr); }, runs, 2);
    };
    time(0, [&](std::string*) {
      k::conv2d_forward(x, w, Tensor(), y, p, routes);
      return true;
    });
    const Tensor y_ref = nabla::conv2d(x, w, {}, opts);
    const Tensor y_act_ref = nabla::conv2d(act, w, {}, opts);
    char buf[64];
    const auto stats_error = [&](const Tensor& ref) {
      const Tensor r = ref.to(nabla::kFloat32);
      const double e =
          std::max(rel_error(sum, r.sum({0, 2, 3})), rel_error(sqsum, nabla::mul(r, r).sum({0, 2, 3})));
      return std::max(e, rel_error(y, ref));
    };
    time(1, [&](std::string* why) {
      return k::conv2d_forward_stats(x, none, w, y, sum, sqsum, p, routes, why);
    });
    std::snprintf(buf, sizeof buf, "%.1e", ok[1] ? stats_error(y_ref) : 0.0);
    err += ok[1] ? buf : "-";
    if (s.prologue) {
      time(2, [&](std::string* why) {
        return k::conv2d_forward_stats(x, pro, w, y, sum, sqsum, p, routes, why);
      });
      std::snprintf(buf, sizeof buf, " %.1e", ok[2] ? stats_error(y_act_ref) : 0.0);
      err += ok[2] ? buf : " -";
    } else {
      ok[2] = false;
      err += " .";
    }
    time(3, [&](std::string*) {
      k::conv2d_backward_input(dy, w, dx, p, routes);
      return true;
    });
    const Tensor dact_ref = nabla::empty_like(x);
    k::conv2d_backward_input(dy, w, dact_ref, p, routes);
    if (s.prologue) {
      const Tensor mask = nabla::gt(nabla::add(nabla::mul(x.to(nabla::kFloat32), scale4), bias4), 0.0);
      const Tensor masked_ref = nabla::mul(dact_ref.to(nabla::kFloat32), mask.to(nabla::kFloat32));
      time(4, [&](std::string* why) {
        return k::conv2d_backward_input_relu_mask(dy, w, x, pro, dx, p, routes, why);
      });
      std::snprintf(buf, sizeof buf, " %.1e", ok[4] ? rel_error(dx, masked_ref) : 0.0);
      err += ok[4] ? buf : " -";
      // dgrad + ReLU mask + batch-norm backward reductions, from a batch norm's saved statistics.
      const k::BatchNormParams bn{.mean = nabla::randn({s.in}, f32) * 0.3,
                                  .invstd = nabla::rand({s.in}, f32) + 0.5,
                                  .weight = nabla::rand({s.in}, f32) + 0.5,
                                  .bias = nabla::randn({s.in}, f32) * 0.3};
      const k::BatchNormBackwardCoefficients co{.dweight = nabla::empty({s.in}, f32),
                                                .dbias = nabla::empty({s.in}, f32),
                                                .eq_dy = nabla::empty({s.in}, f32),
                                                .eq_x = nabla::empty({s.in}, f32),
                                                .eq_bias = nabla::empty({s.in}, f32)};
      time(5, [&](std::string* why) {
        return k::conv2d_backward_input_batch_norm_relu(dy, w, x, bn, dx, co, p, routes, why);
      });
      if (ok[5]) {
        const auto c4 = [&](const Tensor& t) { return t.reshape({1, s.in, 1, 1}); };
        const Tensor xf = x.to(nabla::kFloat32);
        const Tensor xhat = nabla::mul(nabla::sub(xf, c4(bn.mean)), c4(bn.invstd));
        const Tensor pre = nabla::add(nabla::mul(xhat, c4(bn.weight)), c4(bn.bias));
        const Tensor g = nabla::mul(dact_ref.to(nabla::kFloat32), nabla::gt(pre, 0.0).to(nabla::kFloat32));
        const double count = static_cast<double>(kBatch * s.side * s.side);
        const Tensor dbias = g.sum({0, 2, 3}), dweight = nabla::mul(g, xhat).sum({0, 2, 3});
        const Tensor dx_ref =
            nabla::mul(nabla::sub(nabla::sub(g, c4(dbias / count)), nabla::mul(xhat, c4(dweight / count))),
                       c4(nabla::mul(bn.weight, bn.invstd)));
        const Tensor dx_got = nabla::add(
            nabla::add(nabla::mul(dx.to(nabla::kFloat32), c4(co.eq_dy)), nabla::mul(xf, c4(co.eq_x))),
            c4(co.eq_bias));
        const double e = std::max({rel_error(dx, g), rel_error(co.dbias, dbias),
                                   rel_error(co.dweight, dweight), rel_error(dx_got, dx_ref)});
        std::snprintf(buf, sizeof buf, "/%.1e", e);
        err += buf;
      }
    } else {
      ok[4] = ok[5] = false;
      err += " .";
    }
    time(6, [&](std::string*) {
      k::conv2d_backward_weight(dy, x, dw, p, routes);
      return true;
    });
    if (s.prologue) {
      const Tensor dw_ref = nabla::empty_like(w);
      k::conv2d_backward_weight(dy, act, dw_ref, p, routes);
      time(7, [&](std::string* why) {
        return k::conv2d_backward_weight_affine_relu(dy, x, pro, dw, p, routes, why);
      });
      std::snprintf(buf, sizeof buf, " %.1e", ok[7] ? rel_error(dw, dw_ref) : 0.0);
      err += ok[7] ? buf : " -";
    } else {
      ok[7] = false;
      err += " .";
    }
    if (s.prologue) {
      // The prologue's scale and bias in float16 (the dtype cuDNN's ResNet samples use).
      const k::AffineRelu pro16{.scale = pro.scale.to(dtype), .bias = pro.bias.to(dtype)};
      time(8, [&](std::string* why) {
        return k::conv2d_forward_stats(x, pro16, w, y, sum, sqsum, p, routes, why);
      });
      std::snprintf(buf, sizeof buf, " %.1e", ok[8] ? stats_error(y_act_ref) : 0.0);
      err += ok[8] ? buf : " -";
      time(9, [&](std::string* why) {
        return k::conv2d_backward_weight_affine_relu(dy, x, pro16, dw, p, routes, why);
      });
    } else {
      ok[8] = ok[9] = false;
    }
    std::printf("%4lld>%-4lld k%lld s%lld @%-3lld    %3d", (long long)s.in, (long long)s.out,
                (long long)s.kernel, (long long)s.stride, (long long)s.side, s.count);
    for (int c = 0; c < kColumns; ++c) {
      const bool applies = s.prologue || (c != 2 && c != 4 && c != 5 && c != 7 && c < 8);
      if (!applies) {
        std::printf(" %8s", ".");
        continue;
      }
      if (ok[c]) {
        std::printf(" %8.1f", t[c] * 1e3);
        total[c] += s.count * t[c];
      } else {
        std::printf(" %8s", "-");
        all[c] = false;
      }
    }
    std::printf("  %s\n", err.c_str());
    std::fflush(stdout);
  }
  std::printf("%-26s", "weighted total (ms)");
  for (int c = 0; c < kColumns; ++c) std::printf(" %7.2f%s", total[c], all[c] ? " " : "*");
  std::printf("\n(* some shapes had no engine; their time is left out)\n");
  std::printf("engine of the last fused call: %s\n", k::conv_bn_last_engine().c_str());
  return 0;
}
