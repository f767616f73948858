// conv2d_relu on CUDA (one call for convolution + bias [+ residual] + ReLU: cuBLASLt's epilogue
// for 1x1 channels_last, cuDNN's fusion engines for other channels_last 16-bit convolutions,
// cuDNN's legacy fused call otherwise) against the composed ops on the same device, for the convolutions of a
// ResNet (7x7 stride 2, 3x3, 1x1, strided 1x1), with and without a residual, float32 (TF32 off) and float16
// in both layouts; the profiler shows the fused call ran (no separate ReLU). Then a folded ResNet-50 in
// float16 channels_last against the unfolded one.
#include <gtest/gtest.h>

#include "test_util.h"

namespace nabla::testing {
namespace {

struct Case {
  int64_t in, out, kernel, stride, padding, size;
};

TEST(CudaConvRelu, FusedCallMatchesTheComposition) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Routes no_tf32 = routes();
  no_tf32.conv_tf32 = false;
  const RoutesGuard guard(no_tf32);
  NoGradGuard no_grad;
  const uint64_t seed = test_seed();
  const Case cases[] = {
      {3, 64, 7, 2, 3, 32}, {64, 64, 3, 1, 1, 14}, {64, 256, 1, 1, 0, 14}, {256, 128, 1, 2, 0, 14}};
  int k = 0;
  for (const Case& c : cases) {
    for (DType dtype : {kFloat32, kFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        for (bool with_residual : {false, true}) {
          ++k;
          const Device gpu = Device::cuda();
          Tensor x = random_input({4, c.in, c.size, c.size}, seed + 10 * k, kFloat32)
                         .to(gpu, dtype)
                         .contiguous(format);
          Tensor w = (random_input({c.out, c.in, c.kernel, c.kernel}, seed + 10 * k + 1, kFloat32) *
                      (1.0 / static_cast<double>(c.in * c.kernel * c.kernel)))
                         .to(gpu, dtype)
                         .contiguous(format);
          Tensor b = random_input({c.out}, seed + 10 * k + 2, kFloat32).to(gpu, dtype);
          const Conv2dOptions o{.stride = c.stride, .padding = c.padding};
          Tensor plain = conv2d(x, w, b, o);
          Tensor r =
              with_residual
                  ? random_input(plain.sizes(), seed + 10 * k + 3, kFloat32).to(gpu, dtype).contiguous(format)
                  : Tensor();
          Tensor want = relu(with_residual ? add(plain, r) : plain);
          // The bias alone (an epilogue of its own for channels_last 16-bit) against a separate add.
          const Tensor unbiased = conv2d(x, w, {}, o);
          const double bias_tol = dtype == kFloat16 ? 1e-2 : 1e-5;
          EXPECT_TRUE(all_close(plain, add(unbiased, b.reshape({1, c.out, 1, 1})), bias_tol, bias_tol))
              << "bias epilogue, case " << k;
          profiler::start();
          Tensor got = conv2d_relu(x, w, b, {.residual = r}, o);
          const profiler::Report report = profiler::stop();
          const std::string what =
              fmt::format("case {}x{} s{} {} {} residual {}", c.kernel, c.kernel, c.stride, dtype_name(dtype),
                          format == MemoryFormat::Contiguous ? "NCHW" : "NHWC", with_residual);
          bool separate_relu = false;
          for (const auto& row : report.ops) separate_relu = separate_relu || row.op == "relu";
          EXPECT_FALSE(separate_relu) << what << ": cuDNN declined the fused call";
          EXPECT_EQ(got.sizes(), want.sizes()) << what;
          EXPECT_EQ(got.suggest_memory_format(), want.suggest_memory_format()) << what;
          const double tol = dtype == kFloat16 ? 2e-2 : 1e-5;
          EXPECT_TRUE(all_close(got, want, tol, tol)) << what;
        }
      }
    }
  }
}

TEST(CudaConvRelu, FoldedResNet50MatchesTheUnfoldedOneInFloat16) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  manual_seed(test_seed());
  auto model = nn::models::resnet50({.num_classes = 100});
  model->to(Device::cuda(), MemoryFormat::ChannelsLast);
  {
    // Non-trivial running statistics: two training forwards.
    NoGradGuard no_grad;
    for (int i = 0; i < 2; ++i)
      model->forward(random_input({8, 3, 64, 64}, test_seed() + i, kFloat32)
                         .to(Device::cuda())
                         .contiguous(MemoryFormat::ChannelsLast));
  }
  model->eval();
  NoGradGuard no_grad;
  Tensor x = random_input({8, 3, 64, 64}, test_seed() + 7, kFloat32)
                 .to(Device::cuda())
                 .contiguous(MemoryFormat::ChannelsLast);
  Tensor want, got;
  {
    amp::Autocast autocast(Device::cuda(), kFloat16);
    want = model->forward(x).to(kFloat32);
  }
  model->fuse_for_inference();
  {
    amp::Autocast autocast(Device::cuda(), kFloat16);
    got = model->forward(x).to(kFloat32);
  }
  // float16 logits after 53 layers: compare against the logits' own scale.
  const double scale = max(abs(want)).item<double>();
  EXPECT_TRUE(all_close(got, want, 0.0, 0.02 * scale)) << "logit scale " << scale;
}

}  // namespace
}  // namespace nabla::testing
