// CUDA batch norm and layer norm against the CPU backend: forward, backward and running-stat
// updates for every floating dtype, contiguous and channels_last inputs, train and eval, nabla's
// kernels (the default in training, bfloat16 eval, batches past cuDNN's limits, and called
// directly at shapes that split a channel over blocks) and the cuDNN paths (channels_last eval and
// float64 training), nabla's fused BN + add + ReLU kernels against the composed ops, and layer
// norm on short, warp-sized and block-sized rows (the vector kernels for D a multiple of 16 bytes,
// the generic ones else).
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "batch_norm_util.h"
#include "nabla/ops/cuda/batch_norm/kernels.h"
#include "nabla/ops/cuda/norm/kernels.h"
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

struct BnCase {
  const char* name;
  Shape shape;
  bool channels_last = false;
};

const std::vector<BnCase>& bn_cases() {
  static const std::vector<BnCase> cases = {
      {"NCHW", {4, 8, 5, 6}},
      {"NHWC", {4, 8, 5, 6}, true},
      {"(N, C)", {16, 12}},
      {"(N, C, L)", {4, 6, 10}},
      {"NHWC odd channels", {3, 5, 4, 7}, true},
  };
  return cases;
}

TEST(CudaParityBatchNorm, TrainAndEvalForwardBackwardAndRunningStatsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const BnCase& c : bn_cases()) {
    for (DType dtype : kFloatDTypes) {
      const std::string name = c.name;
      const DType pd = param_dtype(dtype);
      const int64_t ch = c.shape[1];
      Tensor x = random_values(c.shape, ++seed, dtype) * 2.0 + 0.5;
      if (c.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
      const Tensor g = random_values(c.shape, ++seed, dtype);
      const Tensor w = random_values({ch}, ++seed, pd), b = random_values({ch}, ++seed, pd);
      const Tensor rm = random_values({ch}, ++seed, pd), rv = random_values({ch}, ++seed, pd, true);
      for (bool training : {true, false}) {
        const BatchNormOptions o{.training = training, .momentum = 0.2, .eps = 1e-4};
        const BnRun gpu = run_batch_norm(x, w, b, rm, rv, g, Device::cuda(), o);
        const BnRun cpu = run_batch_norm(x, w, b, rm, rv, g, Device::cpu(), o);
        expect_runs_match(gpu, cpu, dtype, context(training ? "train" : "eval", dtype, name.c_str()));
        if (c.channels_last) {
          EXPECT_TRUE(gpu.y.is_contiguous(MemoryFormat::ChannelsLast)) << name;
          EXPECT_TRUE(gpu.dx.is_contiguous(MemoryFormat::ChannelsLast)) << name;
        }
        // Affine off and, in training, no running stats.
        const BnRun gpu2 = run_batch_norm(x, {}, {}, training ? Tensor() : rm, training ? Tensor() : rv, g,
                                          Device::cuda(), o);
        const BnRun cpu2 = run_batch_norm(x, {}, {}, training ? Tensor() : rm, training ? Tensor() : rv, g,
                                          Device::cpu(), o);
        expect_runs_match(gpu2, cpu2, dtype,
                          context(training ? "train, no affine" : "eval, no affine", dtype, name.c_str()));
      }
    }
  }
}

TEST(CudaParityBatchNorm, BatchesPastCudnnLimitsRunOnNablaKernels) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  // cuDNN takes N <= 880801 in training and N <= 65535 in eval.
  for (const auto& [n, training] : {std::pair<int64_t, bool>{900000, true}, {70000, false}}) {
    Tensor x = random_values({n, 3}, ++seed, kFloat32);
    const Tensor g = random_values({n, 3}, ++seed, kFloat32);
    const Tensor w = random_values({3}, ++seed, kFloat32), b = random_values({3}, ++seed, kFloat32);
    const Tensor rm = random_values({3}, ++seed, kFloat32), rv = random_values({3}, ++seed, kFloat32, true);
    const BatchNormOptions o{.training = training};
    const BnRun gpu = run_batch_norm(x, w, b, rm, rv, g, Device::cuda(), o);
    const BnRun cpu = run_batch_norm(x, w, b, rm, rv, g, Device::cpu(), o);
    // Sums of a million float32 values: the float accumulation on the GPU costs a few digits.
    EXPECT_TRUE(matches_cpu(gpu.y, cpu.y, Tolerance{1e-3, 1e-3})) << "N " << n;
    EXPECT_TRUE(matches_cpu(gpu.dx, cpu.dx, Tolerance{1e-3, 1e-3})) << "N " << n;
    EXPECT_TRUE(matches_cpu(gpu.dw, cpu.dw, Tolerance{1e-3, 1e-2})) << "N " << n;
    EXPECT_TRUE(matches_cpu(gpu.running_var, cpu.running_var, Tolerance{1e-3, 1e-4})) << "N " << n;
  }
}

// nabla's kernels called directly (cuDNN would take these calls) at shapes where a channel's sum
// is split over many blocks, in both layouts and with a mean far from zero (the one-pass
// variance is shifted by a sample of the channel; unshifted, float32 would lose it), against
// float64 on the CPU from the same values.
TEST(CudaParityBatchNorm, NablaKernelsSplitChannelSumsAndKeepTheVarianceOfAnOffsetInput) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  struct Case {
    const char* name;
    Shape shape;
    bool channels_last;
  };
  const std::vector<Case> cases = {
      {"NCHW, 8-wide planes", {32, 16, 32, 32}, false},
      {"NCHW, odd planes", {64, 24, 7, 7}, false},
      {"NHWC", {32, 40, 16, 16}, true},
      {"NHWC, hundreds of splits", {64, 64, 28, 28}, true},
      {"NHWC, odd channels", {16, 3, 9, 9}, true},
      {"NHWC, 2-wide channels", {16, 6, 9, 9}, true},
      {"(N, C) tall", {200000, 5}, false},
  };
  for (const Case& c : cases) {
    for (DType dtype : {kFloat32, kFloat64}) {
      const int64_t ch = c.shape[1];
      Tensor x = random_values(c.shape, ++seed, dtype) * 0.5 + 100.0;
      if (c.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
      const Tensor g = random_values(c.shape, ++seed, dtype);
      const Tensor w = random_values({ch}, ++seed, dtype), b = random_values({ch}, ++seed, dtype);
      const Tensor rm = random_values({ch}, ++seed, dtype), rv = random_values({ch}, ++seed, dtype, true);
      const BatchNormOptions o{.momentum = 0.3, .eps = 1e-5};
      const BnRun ref = run_batch_norm(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), rm.to(kFloat64),
                                       rv.to(kFloat64), g.to(kFloat64), Device::cpu(), o);

      const Tensor xd = to_cuda(x), gd = to_cuda(g).contiguous(x.suggest_memory_format());
      const Tensor wd = to_cuda(w), bd = to_cuda(b), rmd = to_cuda(rm), rvd = to_cuda(rv);
      const Tensor y = empty_like(xd), dx = empty_like(xd), dw = empty_like(wd), db = empty_like(bd);
      const ops::BatchNormStats stats{empty_like(wd), empty_like(wd)};
      ops::cuda::batch_norm_forward_kernel({xd, wd, bd, rmd, rvd}, y, stats, o.momentum, o.eps);
      ops::cuda::batch_norm_backward_kernel(gd, xd, wd, stats, {dx, {}, dw, db});
      const Tensor yi = empty_like(xd);
      ops::cuda::batch_norm_inference_kernel({xd, wd, bd, rmd, rvd}, yi, o.eps);
      const Tensor yi_ref =
          run_batch_norm(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), ref.running_mean, ref.running_var,
                         g.to(kFloat64), Device::cpu(), {.training = false, .eps = o.eps})
              .y;

      // x is 100 +- 1 in float32: x - mean carries x's rounding, about 1e-5 of a standard deviation.
      const Tolerance tol = dtype == kFloat64 ? Tolerance{1e-9, 1e-9} : Tolerance{2e-4, 2e-4};
      const std::string what = context("kernels", dtype, c.name);
      EXPECT_TRUE(matches_cpu(y, ref.y.to(dtype), tol)) << what << " y";
      EXPECT_TRUE(matches_cpu(rmd, ref.running_mean.to(dtype), tol)) << what << " running_mean";
      EXPECT_TRUE(matches_cpu(rvd, ref.running_var.to(dtype), tol)) << what << " running_var";
      EXPECT_TRUE(matches_cpu(dx, ref.dx.to(dtype), tol)) << what << " dx";
      EXPECT_TRUE(matches_cpu(dw, ref.dw.to(dtype), Tolerance{tol.rtol * 10, tol.atol * 10}))
          << what << " dw";
      EXPECT_TRUE(matches_cpu(db, ref.db.to(dtype), Tolerance{tol.rtol * 10, tol.atol * 10}))
          << what << " db";
      EXPECT_TRUE(matches_cpu(yi, yi_ref.to(dtype), tol)) << what << " eval y";
      if (c.channels_last) EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast)) << what;
    }
  }
}

// bfloat16 NCHW training and bfloat16 eval run on nabla's kernels through the public op, at
// ResNet-like shapes (8-wide, 4-wide and odd planes; channels_last eval).
TEST(CudaParityBatchNorm, BFloat16OnNablaKernelsMatchesTheCpuAtResNetShapes) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const BnCase& c : std::vector<BnCase>{{"28x28", {16, 64, 28, 28}},
                                             {"14x14", {8, 48, 14, 14}},
                                             {"7x7", {16, 96, 7, 7}},
                                             {"NHWC", {8, 64, 14, 14}, true}}) {
    const int64_t ch = c.shape[1];
    Tensor x = random_values(c.shape, ++seed, kBFloat16) * 2.0 + 0.5;
    if (c.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    const Tensor g = random_values(c.shape, ++seed, kBFloat16);
    const Tensor w = random_values({ch}, ++seed, kFloat32), b = random_values({ch}, ++seed, kFloat32);
    const Tensor rm = random_values({ch}, ++seed, kFloat32), rv = random_values({ch}, ++seed, kFloat32, true);
    for (bool training : {true, false}) {
      const BatchNormOptions o{.training = training, .momentum = 0.2};
      const BnRun gpu = run_batch_norm(x, w, b, rm, rv, g, Device::cuda(), o);
      const BnRun cpu = run_batch_norm(x, w, b, rm, rv, g, Device::cpu(), o);
      expect_runs_match(gpu, cpu, kBFloat16, context(training ? "train" : "eval", kBFloat16, c.name));
    }
  }
}

// Every route of the CUDA batch-norm family (ops/cuda/batch_norm/routes.cpp) is taken by a case
// here, as the route table chooses it, and the public op on that case matches the CPU (fused
// 16-bit training against the float64 composition, which it rounds once). A training forward
// reports the route that ran, and the backend's backward takes it. A route the cases miss fails
// the test: a new route cannot skip parity.
TEST(CudaParityBatchNorm, EveryRouteMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  using R = ops::cuda::BatchNormRoute;
  struct Case {
    const char* name;
    DType dtype;
    MemoryFormat format;
    bool training;
    int fused;   // 0: batch_norm, 1: batch_norm_relu, 2: batch_norm_add_relu
    R expected;  // the route this case was written for
  };
  constexpr auto kCl = MemoryFormat::ChannelsLast, kNchw = MemoryFormat::Contiguous;
  const Case cases[] = {
      {"plain NCHW", kFloat32, kNchw, true, 0, R::Kernels},
      {"plain NHWC", kFloat16, kCl, true, 0, R::Kernels},
      {"plain NHWC", kBFloat16, kCl, true, 0, R::Kernels},
      {"plain NHWC", kFloat64, kCl, true, 0, R::CudnnEx},
      {"relu NHWC", kFloat16, kCl, true, 1, R::KernelsReluMaskFromX},
      {"relu NCHW", kFloat32, kNchw, true, 1, R::KernelsReluMaskFromX},
      {"add_relu NHWC", kBFloat16, kCl, true, 2, R::Kernels},
      {"add_relu NCHW", kFloat64, kNchw, true, 2, R::Kernels},
      {"eval NHWC", kFloat16, kCl, false, 0, R::CudnnInference},
      {"eval NHWC", kFloat64, kCl, false, 0, R::CudnnInference},
      {"eval NHWC", kBFloat16, kCl, false, 0, R::KernelsInference},
      {"eval NCHW", kFloat32, kNchw, false, 1, R::KernelsInference},
  };
  uint64_t seed = test_seed();
  const Shape shape = {8, 32, 7, 7};
  std::set<ops::cuda::BatchNormRoute> covered;
  for (const Case& c : cases) {
    const DType pd = param_dtype(c.dtype);
    const Tensor x = random_values(shape, ++seed, c.dtype).contiguous(c.format);
    const Tensor z = random_values(shape, ++seed, c.dtype).contiguous(c.format);
    const Tensor g = random_values(shape, ++seed, c.dtype);
    const Tensor w = random_values({32}, ++seed, pd), b = random_values({32}, ++seed, pd);
    const Tensor rm = random_values({32}, ++seed, pd), rv = random_values({32}, ++seed, pd, true);
    const BatchNormOptions o{.training = c.training};
    const R route = ops::cuda::batch_norm_route(to_cuda(x), c.training, c.fused > 0, c.fused == 2, o.eps);
    EXPECT_EQ(route, c.expected) << c.name << " " << dtype_name(c.dtype) << ": "
                                 << ops::cuda::route_name(route) << " instead of "
                                 << ops::cuda::route_name(c.expected);
    covered.insert(c.expected);
    const std::string what = context(c.name, c.dtype, ops::cuda::route_name(route));
    const Tensor zi = c.fused == 2 ? z : Tensor();
    const BnRun gpu = run_batch_norm(x, w, b, rm, rv, g, Device::cuda(), o, zi, c.fused);
    const bool fused_16bit = c.training && c.fused > 0 && (c.dtype == kFloat16 || c.dtype == kBFloat16);
    if (fused_16bit) {
      expect_one_rounding_match(gpu, composed_reference(x, z, w, b, rm, rv, g, o, c.fused == 2), c.dtype,
                                what);
    } else {
      const BnRun cpu = run_batch_norm(x, w, b, rm, rv, g, Device::cpu(), o, zi, c.fused);
      expect_runs_match(gpu, cpu, c.dtype, what);
      if (c.fused == 2) EXPECT_TRUE(matches_cpu(gpu.dz, cpu.dz, output_tolerance(c.dtype))) << what << " dz";
    }
    if (!c.training) continue;
    // The backend reports the route it ran, which is the one the table chose.
    NoGradGuard no_grad;
    const Tensor xc = to_cuda(x), y = empty_like(xc);
    const TensorOptions params{.dtype = pd, .device = Device::cuda()};
    const ops::BatchNormStats stats{empty({32}, params), empty({32}, params)};
    const ops::BatchNormSaved saved = ops::cuda::kBatchNorm.forward({xc, to_cuda(w), to_cuda(b), {}, {}},
                                                                    c.fused == 2 ? to_cuda(z) : Tensor(),
                                                                    c.fused > 0, y, stats, 0.1, o.eps);
    EXPECT_EQ(saved.route, static_cast<uint8_t>(c.expected)) << what;
  }
  for (const R route : ops::cuda::batch_norm_routes())
    EXPECT_TRUE(covered.contains(route)) << "no parity case takes the route " << ops::cuda::route_name(route);
}

// nabla's fused channels_last 16-bit kernels round relu(bn(x) [+ z]) once: the composed CPU ops
// in float64 are the reference, with a gradient the caller holds and with one the op may write
// over.
TEST(CudaParityBatchNorm, FusedNhwcHalfBatchNormAddReluMatchesTheComposedCpuResult) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const Shape shape = {8, 32, 7, 7};
  for (DType dtype : {kFloat16, kBFloat16}) {
    const Tensor x = random_values(shape, ++seed, dtype).contiguous(MemoryFormat::ChannelsLast);
    const Tensor z = random_values(shape, ++seed, dtype).contiguous(MemoryFormat::ChannelsLast);
    const Tensor g = random_values(shape, ++seed, dtype);
    const Tensor w = random_values({32}, ++seed, kFloat32), b = random_values({32}, ++seed, kFloat32);
    const Tensor rm = random_values({32}, ++seed, kFloat32), rv = random_values({32}, ++seed, kFloat32, true);
    for (const auto& [add, owned] : {std::pair{true, false}, {true, true}, {false, false}, {false, true}}) {
      const BatchNormOptions o{.momentum = 0.3};
      const BnRun gpu =
          run_batch_norm(x, w, b, rm, rv, g, Device::cuda(), o, add ? z : Tensor(), add ? 2 : 1, owned);
      const std::string what = context(add ? "bn_add_relu" : "bn_relu", dtype, owned ? "owned grad" : "");
      EXPECT_TRUE(gpu.y.is_contiguous(MemoryFormat::ChannelsLast)) << what;
      expect_one_rounding_match(gpu, composed_reference(x, z, w, b, rm, rv, g, o, add), dtype, what);
    }
  }
}

// In training the fused variants run on nabla's kernels (the add and the ReLU in the normalizing
// pass, the ReLU's mask in the backward, recomputed from x without the add) for contiguous input
// and channels_last float32/float16/bfloat16; channels_last float64 (whose batch norm runs on
// cuDNN's Ex kernels) and eval compose the ops.
// All against the CPU's composed ops, for every dtype, at a small shape and at one whose channel
// sums split over blocks (contiguous: planes of 8-wide vectors; channels_last: 64 channels of
// 4-wide vectors over many row tiles); with a gradient the caller holds, and with one the op may
// write dx or dz over.
TEST(CudaParityBatchNorm, FusedVariantsMatchTheCpuInBothLayouts) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const std::pair<MemoryFormat, Shape> cases[] = {{MemoryFormat::Contiguous, {4, 6, 3, 5}},
                                                  {MemoryFormat::Contiguous, {16, 24, 16, 16}},
                                                  {MemoryFormat::ChannelsLast, {4, 6, 3, 5}},
                                                  {MemoryFormat::ChannelsLast, {8, 64, 14, 14}}};
  for (const auto& [format, shape] : cases) {
    for (DType dtype : kFloatDTypes) {
      const int64_t ch = shape[1];
      const Tensor x = random_values(shape, ++seed, dtype).contiguous(format);
      const Tensor z = random_values(shape, ++seed, dtype).contiguous(format);
      const Tensor g = random_values(shape, ++seed, dtype);
      const DType pd = param_dtype(dtype);
      const Tensor w = random_values({ch}, ++seed, pd), b = random_values({ch}, ++seed, pd);
      const Tensor rm = random_values({ch}, ++seed, pd), rv = random_values({ch}, ++seed, pd, true);
      for (bool training : {true, false}) {
        for (const auto& [fused, owned] : {std::pair{1, false}, {1, true}, {2, false}, {2, true}}) {
          const BatchNormOptions o{.training = training};
          const Tensor zi = fused == 2 ? z : Tensor();
          const BnRun gpu = run_batch_norm(x, w, b, rm, rv, g, Device::cuda(), o, zi, fused, owned);
          const std::string what =
              context(fused == 2 ? "add_relu" : "relu", dtype, training ? "train" : "eval") + " " +
              shape_str(shape) + (format == MemoryFormat::ChannelsLast ? " channels_last" : "") +
              (owned ? " owned grad" : "");
          EXPECT_TRUE(gpu.y.is_contiguous(format)) << what;
          // A fused 16-bit forward rounds once, where the composed ops round before the add.
          if (training && (dtype == kFloat16 || dtype == kBFloat16)) {
            expect_one_rounding_match(gpu, composed_reference(x, z, w, b, rm, rv, g, o, fused == 2), dtype,
                                      what);
            continue;
          }
          const BnRun cpu = run_batch_norm(x, w, b, rm, rv, g, Device::cpu(), o, zi, fused);
          expect_runs_match(gpu, cpu, dtype, what);
          if (fused == 2) EXPECT_TRUE(matches_cpu(gpu.dz, cpu.dz, output_tolerance(dtype))) << what << " dz";
        }
      }
    }
  }
}

// Note [The ReLU's mask from x]: after nabla's relu(bn(x)) forward, the backward that
// recomputes the ReLU's mask from x must equal, bit for bit, the one that reads the mask from y,
// in every dtype and both layouts, including a channel whose normalized values are all exactly
// zero (a constant channel with a zero bias: y == 0 there, and x - mean == 0 too), one whose
// are all 1e-8 (a constant channel with that bias: positive, yet a zero y in float16), and
// channels at relu_passes' bounds: half of float16's and of bfloat16's smallest subnormal
// (which round to a zero y) and the next floats up (which do not).
TEST(CudaParityBatchNorm, ReluMaskFromXEqualsTheMaskFromTheOutput) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const float half_bound = 0x1p-25f, bf16_bound = 0x1p-134f;
  const float bounds[4] = {half_bound, std::nextafter(half_bound, 1.0f), bf16_bound,
                           std::nextafter(bf16_bound, 1.0f)};
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (DType dtype : kFloatDTypes) {
      const Shape shape = {8, 64, 10, 12};
      const DType pd = param_dtype(dtype);
      Tensor xh = random_values(shape, ++seed, dtype);
      xh.narrow(1, 3, 1).fill_(0.75);
      xh.narrow(1, 5, 1).fill_(-0.5);
      Tensor bh = random_values({64}, ++seed, pd);
      bh.narrow(0, 3, 1).fill_(0.0);
      bh.narrow(0, 5, 1).fill_(1e-8);
      for (int i = 0; i < 4; ++i) {
        xh.narrow(1, 6 + i, 1).fill_(0.25);
        bh.narrow(0, 6 + i, 1).fill_(static_cast<double>(bounds[i]));
      }
      const Tensor x = to_cuda(xh.contiguous(format)),
                   dy = to_cuda(random_values(shape, ++seed, dtype).contiguous(format));
      const Tensor w = to_cuda(random_values({64}, ++seed, pd)), b = to_cuda(bh);
      const TensorOptions cuda_params{.dtype = pd, .device = Device::cuda()};
      const ops::BatchNormStats stats{empty({64}, cuda_params), empty({64}, cuda_params)};
      const Tensor y = empty_like(x);
      ops::cuda::batch_norm_forward_kernel({x, w, b, {}, {}}, y, stats, 0.1, 1e-5, {}, /*relu=*/true);
      const auto backward = [&](bool from_x) {
        const ops::BatchNormGrads g{
            .dx = empty_like(x), .dweight = empty({64}, cuda_params), .dbias = empty({64}, cuda_params)};
        ops::cuda::batch_norm_backward_kernel(dy, x, w, stats, g, from_x ? Tensor() : y,
                                              {.on = from_x, .bias = from_x ? b : Tensor()});
        return g;
      };
      const ops::BatchNormGrads from_y = backward(false), from_x = backward(true);
      const std::string what =
          context("mask from x", dtype, format == MemoryFormat::ChannelsLast ? "channels_last" : "NCHW");
      for (const auto& [a, e, name] : {std::tuple{from_x.dx, from_y.dx, "dx"},
                                       {from_x.dweight, from_y.dweight, "dweight"},
                                       {from_x.dbias, from_y.dbias, "dbias"}}) {
        NoGradGuard no_grad;
        EXPECT_EQ(max(abs(a.to(kFloat64) - e.to(kFloat64))).item<double>(), 0.0) << what << " " << name;
      }
      // The constant zero channel's gradient is masked away entirely, and so is the 1e-8 one's
      // in float16, where its output rounds to zero.
      EXPECT_EQ(max(abs(from_x.dx.narrow(1, 3, 1).to(kFloat64))).item<double>(), 0.0) << what;
      if (dtype == kFloat16)
        EXPECT_EQ(max(abs(from_x.dx.narrow(1, 5, 1).to(kFloat64))).item<double>(), 0.0) << what;
      // At each bound the y is zero in the dtype whose bound it is; a float above it passes.
      const auto passed = [&](int channel) {
        return max(abs(from_x.dx.narrow(1, channel, 1).to(kFloat64))).item<double>() > 0.0;
      };
      EXPECT_EQ(passed(6), dtype != kFloat16) << what << " at half of float16's smallest subnormal";
      EXPECT_TRUE(passed(7)) << what << " just above it";
      EXPECT_EQ(passed(8), dtype != kFloat16 && dtype != kBFloat16)
          << what << " at half of bfloat16's smallest subnormal";
      EXPECT_EQ(passed(9), dtype != kFloat16) << what << " just above it";
      EXPECT_GT(max(abs(from_x.dx.to(kFloat64))).item<double>(), 0.0) << what;
    }
  }
}

// ---- layer norm ------------------------------------------------------------------------------

TEST(CudaParityLayerNorm, LayerAndRmsNormMatchTheCpuOnShortWarpAndBlockRows) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* name;
    Shape shape;
    Shape normalized;
  };
  // Rows of a whole number of 16-byte vectors take the vector kernels (up to a length per dtype).
  // GPT-2's have more rows (1401, not a multiple of a block's) than one wave of backward blocks
  // covers on an H100 or H200 (2 blocks of 4 rows per SM): each block adds up several sweeps.
  const std::vector<Case> cases = {
      {"short rows (7)", {50, 7}, {7}},           {"warp rows (300, two dims)", {8, 3, 100}, {3, 100}},
      {"warp rows (1024)", {33, 1024}, {1024}},   {"long rows (4096)", {64, 4096}, {4096}},
      {"single long row", {1, 5000}, {5000}},     {"many short rows", {3000, 20}, {20}},
      {"GPT-2 rows (768)", {3, 467, 768}, {768}},
  };
  uint64_t seed = test_seed();
  for (const Case& c : cases) {
    for (DType dtype : kFloatDTypes) {
      const Tensor x = random_values(c.shape, ++seed, dtype) + 0.5;
      const Tensor g = random_values(c.shape, ++seed, dtype);
      const Tensor w = random_values(c.normalized, ++seed, dtype),
                   b = random_values(c.normalized, ++seed, dtype);
      Tensor outs[2][4], rms[2][3];
      for (int d = 0; d < 2; ++d) {
        const Device device = d == 0 ? Device::cpu() : Device::cuda();
        Tensor xi = x.to(device).detach().requires_grad_(true);
        Tensor wi = w.to(device).detach().requires_grad_(true),
               bi = b.to(device).detach().requires_grad_(true);
        Tensor y = layer_norm(xi, c.normalized, wi, bi, {.eps = 1e-5});
        y.backward(g.to(device));
        outs[d][0] = y, outs[d][1] = xi.grad(), outs[d][2] = wi.grad(), outs[d][3] = bi.grad();
        // RMS norm on the same kernels without the centring; no bias.
        Tensor xr = x.to(device).detach().requires_grad_(true);
        Tensor wr = w.to(device).detach().requires_grad_(true);
        Tensor r = rms_norm(xr, c.normalized, wr, {.eps = 1e-5});
        r.backward(g.to(device));
        rms[d][0] = r, rms[d][1] = xr.grad(), rms[d][2] = wr.grad();
      }
      const Tolerance out = output_tolerance(dtype);
      const Tolerance par = dtype == kFloat64   ? Tolerance{1e-10, 1e-10}
                            : dtype == kFloat32 ? Tolerance{1e-4, 1e-4}
                                                : Tolerance{2e-2, 2e-2};
      const char* names[4] = {"y", "dx", "dweight", "dbias"};
      for (int k = 0; k < 4; ++k) {
        EXPECT_TRUE(matches_cpu(outs[1][k], outs[0][k], k < 2 ? out : par))
            << context("layer_norm", dtype, c.name) << " " << names[k];
      }
      for (int k = 0; k < 3; ++k) {
        EXPECT_TRUE(matches_cpu(rms[1][k], rms[0][k], k < 2 ? out : par))
            << context("rms_norm", dtype, c.name) << " " << names[k];
      }
    }
  }
}

// layer_norm's dtype option on the GPU: a float32 input with a 16-bit result equals the norm then
// the cast, bit for bit, forward and backward: on the vector kernels (D = 768, GPT-2's rows: one
// kernel each way) and where they do not apply (D = 101, no whole number of 16-byte vectors: the
// norm in float32, then the cast).
TEST(CudaParityLayerNorm, DtypeOptionEqualsTheNormThenTheCast) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const int64_t D : {768, 101}) {
    for (DType dtype : {kBFloat16, kFloat16}) {
      for (const bool rms : {false, true}) {
        const Tensor x0 = (random_values({5, 67, D}, ++seed, kFloat32) + 0.5).to(Device::cuda());
        const Tensor w0 = random_values({D}, ++seed, kFloat32).to(Device::cuda()),
                     b0 = random_values({D}, ++seed, kFloat32).to(Device::cuda());
        const Tensor g = random_values({5, 67, D}, ++seed, kFloat32).to(Device::cuda(), dtype);
        TensorList results[2];
        for (int fused = 0; fused < 2; ++fused) {
          const Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true),
                       b = b0.detach().requires_grad_(true);
          const std::optional<DType> out = fused ? std::optional<DType>(dtype) : std::nullopt;
          Tensor y = rms ? rms_norm(x, {D}, w, {.dtype = out}) : layer_norm(x, {D}, w, b, {.dtype = out});
          if (!fused) y = y.to(dtype);
          y.backward(g);
          results[fused] = {y, x.grad(), w.grad(), rms ? Tensor() : b.grad()};
        }
        for (size_t k = 0; k < 4; ++k) {
          if (!results[0][k].defined()) continue;
          EXPECT_TRUE(all_close(results[1][k], results[0][k], 0, 0))
              << "D " << D << " " << dtype_name(dtype) << (rms ? " rms_norm" : " layer_norm") << " output "
              << k;
        }
      }
    }
  }
}

// add_layer_norm's fused kernels against the add then the norm on the same GPU, bit for bit: a
// float32 x with a float32 or bfloat16 y, a float32 or bfloat16 result, both outputs' gradients
// used (or only the norm's, as after a transformer's last block), on GPT-2's rows, on rows the
// vector kernels do not take (D = 101: the composition itself) and on rows only the forward's
// vector kernel takes (D = 6144: the backward composes).
TEST(CudaParityLayerNorm, AddLayerNormEqualsTheAddThenTheNorm) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const Device gpu = Device::cuda();
  for (const int64_t D : {768, 101, 6144}) {
    for (DType y_dtype : {kFloat32, kBFloat16}) {
      for (DType z_dtype : {kFloat32, kBFloat16}) {
        for (const bool use_sum : {true, false}) {
          const Tensor x0 = random_values({3, 71, D}, ++seed, kFloat32).to(gpu);
          const Tensor y0 = random_values({3, 71, D}, ++seed, kFloat32).to(gpu, y_dtype);
          const Tensor w0 = random_values({D}, ++seed, kFloat32).to(gpu),
                       b0 = random_values({D}, ++seed, kFloat32).to(gpu);
          const Tensor gh = random_values({3, 71, D}, ++seed, kFloat32).to(gpu);
          const Tensor gz = random_values({3, 71, D}, ++seed, kFloat32).to(gpu, z_dtype);
          TensorList results[2];
          for (int fused = 0; fused < 2; ++fused) {
            const Tensor x = x0.detach().requires_grad_(true), y = y0.detach().requires_grad_(true),
                         w = w0.detach().requires_grad_(true), b = b0.detach().requires_grad_(true);
            Tensor h, z;
            if (fused) {
              const AddNorm r = add_layer_norm(x, y, {D}, w, b, {.dtype = z_dtype});
              h = r.sum, z = r.normalized;
            } else {
              h = x + y;
              z = layer_norm(h, {D}, w, b, {.dtype = z_dtype});
            }
            EXPECT_EQ(z.dtype(), z_dtype);
            if (use_sum) {
              autograd::backward({h, z}, {gh, gz});
            } else {
              z.backward(gz);
            }
            results[fused] = {h, z, x.grad(), y.grad(), w.grad(), b.grad()};
          }
          const char* names[6] = {"sum", "norm", "dx", "dy", "dweight", "dbias"};
          for (size_t k = 0; k < 6; ++k) {
            EXPECT_TRUE(all_close(results[1][k], results[0][k], 0, 0))
                << "D " << D << " y " << dtype_name(y_dtype) << " z " << dtype_name(z_dtype) << " use_sum "
                << use_sum << " " << names[k];
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace nabla
