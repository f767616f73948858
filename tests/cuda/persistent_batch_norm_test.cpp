// The persistent batch-norm kernels (Note [Persistent batch norm] in
// ops/cuda/batch_norm_persistent.cu) through the public ops, against the CPU in float64: every
// variant (plain, + ReLU, + add + ReLU), with a gradient the caller holds and with one the op may
// write over, at shapes that leave blocks without rows, leave threads of a block idle, and make
// threads stream rows they did not keep; against the two-pass kernels where the CPU reference
// would take too long; and inside a CUDA graph, which must replay it on new data.
#include "batch_norm_util.h"
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/ops/cuda/norm_kernels.h"
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

struct Inputs {
  Tensor x, z, g, w, b, rm, rv;
};

Inputs make_inputs(const Shape& shape, DType dtype, uint64_t& seed) {
  const int64_t ch = shape[1];
  const DType pd = param_dtype(dtype);
  const MemoryFormat format = shape.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  Inputs in;
  in.x = (random_values(shape, ++seed, dtype) * 2.0 + 0.5).contiguous(format);
  in.z = random_values(shape, ++seed, dtype).contiguous(format);
  in.g = random_values(shape, ++seed, dtype);
  in.w = random_values({ch}, ++seed, pd) + 0.5;
  in.b = random_values({ch}, ++seed, pd);
  in.rm = random_values({ch}, ++seed, pd);
  in.rv = random_values({ch}, ++seed, pd, true);
  return in;
}

const char* variant_name(int fused) {
  return fused == 0 ? "batch_norm" : fused == 1 ? "batch_norm_relu" : "batch_norm_add_relu";
}

TEST(CudaPersistentBatchNorm, TakesShortChannelsLastRowsOfWholeVectorsOnly) {
  SKIP_WITHOUT_GPU();
  const PersistentBatchNorm on(true);
  const auto takes = [](const Shape& shape, DType dtype, MemoryFormat format) {
    return ops::cuda::persistent_batch_norm_takes(
        zeros(shape, {.dtype = dtype, .device = Device::cuda()}).contiguous(format));
  };
  EXPECT_TRUE(takes({2, 64, 3, 3}, kBFloat16, MemoryFormat::ChannelsLast));
  EXPECT_TRUE(takes({2, 4, 3, 3}, kFloat32, MemoryFormat::ChannelsLast));
  EXPECT_TRUE(takes({2, 2048, 1, 2}, kFloat16, MemoryFormat::ChannelsLast));
  EXPECT_FALSE(takes({2, 4096, 1, 2}, kFloat16, MemoryFormat::ChannelsLast)) << "more vectors than threads";
  EXPECT_FALSE(takes({2, 6, 3, 3}, kBFloat16, MemoryFormat::ChannelsLast)) << "6 is not whole vectors of 4";
  EXPECT_FALSE(takes({2, 64, 3, 3}, kBFloat16, MemoryFormat::Contiguous)) << "NCHW";
  EXPECT_FALSE(takes({2, 64, 3, 3}, kFloat64, MemoryFormat::ChannelsLast)) << "float64";
  EXPECT_TRUE(takes({4, 64, 128, 128}, kBFloat16, MemoryFormat::ChannelsLast)) << "65536 rows";
  EXPECT_FALSE(takes({4, 64, 128, 129}, kBFloat16, MemoryFormat::ChannelsLast)) << "more than 65536 rows";
  const PersistentBatchNorm off(false);
  EXPECT_FALSE(takes({2, 64, 3, 3}, kBFloat16, MemoryFormat::ChannelsLast)) << "switched off";
}

// Through the public ops, which take the persistent kernels for these shapes in every dtype
// when switched on (up to kPersistentMaxRows rows, batch_norm_persistent.cu).
TEST(CudaPersistentBatchNorm, EveryVariantMatchesTheCpuInFloat64) {
  SKIP_WITHOUT_GPU();
  const PersistentBatchNorm on(true);
  uint64_t seed = test_seed();
  struct Case {
    const char* name;
    Shape shape;
  };
  const Case cases[] = {
      {"rows fewer than blocks", {2, 64, 3, 3}},
      {"idle threads (48 channels)", {16, 48, 20, 20}},
      {"2-d (N, C)", {300, 40}},
      {"14x14", {32, 256, 14, 14}},
  };
  for (const Case& c : cases) {
    for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
      const Inputs in = make_inputs(c.shape, dtype, seed);
      ASSERT_TRUE(ops::cuda::persistent_batch_norm_takes(to_cuda(in.x))) << c.name;
      for (int fused : {0, 1, 2}) {
        if (c.shape.size() == 2 && fused != 0) continue;  // the fused ops take images
        for (bool owned : {false, true}) {
          const BatchNormOptions o{.momentum = 0.3};
          const Tensor z = fused == 2 ? in.z : Tensor();
          const BnRun gpu =
              run_batch_norm(in.x, in.w, in.b, in.rm, in.rv, in.g, Device::cuda(), o, z, fused, owned);
          const std::string what = context(variant_name(fused), dtype, c.name) + (owned ? " owned grad" : "");
          if (c.shape.size() == 4) EXPECT_TRUE(gpu.y.is_contiguous(MemoryFormat::ChannelsLast)) << what;
          // The fused 16-bit forward rounds once, where the composed CPU ops round twice.
          if (fused != 0 && dtype != kFloat32) {
            expect_one_rounding_match(
                gpu, composed_reference(in.x, in.z, in.w, in.b, in.rm, in.rv, in.g, o, fused == 2), dtype,
                what);
            continue;
          }
          const BnRun cpu = run_batch_norm(in.x, in.w, in.b, in.rm, in.rv, in.g, Device::cpu(), o, z, fused);
          expect_runs_match(gpu, cpu, dtype, what);
          if (fused == 2) EXPECT_TRUE(matches_cpu(gpu.dz, cpu.dz, output_tolerance(dtype))) << what << " dz";
        }
      }
    }
  }
}

// Threads that stream rows they did not keep, in both passes: activations taller than the
// routes give the persistent kernels (kPersistentMaxRows), so called directly, against the two-pass
// kernels, which compute the same formulas with sums in another order. The backwards run from
// one forward's statistics and output, so the ReLU's masks are the same on both routes (masks
// from the statistics of either forward could differ where bn(x) + z rounds to either side of
// zero). Against float64 on the CPU too, for the plain batch norm, whose result has no mask.
TEST(CudaPersistentBatchNorm, StreamedRowsMatchTheTwoPassKernels) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  namespace k = ops::cuda;
  struct Case {
    Shape shape;
    DType dtype;
  };
  // About 70 rows a thread in 16-bit (56 kept in the forward, 26 in the backward) and 35 in
  // float32 (28 and 13).
  const Case cases[] = {
      {{128, 8, 136, 136}, kFloat16}, {{128, 8, 136, 136}, kBFloat16}, {{64, 16, 96, 96}, kFloat32}};
  for (const Case& c : cases) {
    const Inputs h = make_inputs(c.shape, c.dtype, seed);
    const Tensor x = to_cuda(h.x), z = to_cuda(h.z), dy = to_cuda(h.g).contiguous(MemoryFormat::ChannelsLast);
    const Tensor w = to_cuda(h.w), b = to_cuda(h.b);
    const auto params = [&] { return empty_like(w); };
    // persistent: the kernels called directly (the entry points leave activations this tall to
    // the two-pass kernels); else the two-pass kernels, with the switch off.
    const PersistentBatchNorm two_pass_route(false);
    const auto forward = [&](bool persistent, const Tensor& zf, bool relu, k::BatchNormStats& stats,
                             Tensor& y, Tensor& rm, Tensor& rv) {
      stats = {params(), params()};
      y = empty_like(x);
      rm = to_cuda(h.rm);
      rv = to_cuda(h.rv);
      if (persistent) {
        ASSERT_TRUE(k::batch_norm_forward_persistent({x, w, b, rm, rv}, y, stats, 0.3, 1e-5, zf, relu));
      } else {
        k::batch_norm_forward_kernel({x, w, b, rm, rv}, y, stats, 0.3, 1e-5, zf, relu);
      }
    };
    // in_place: the result written over a copy of dy (dz with the add, else dx), as the fused
    // ops do with a gradient nothing else holds; threads then re-read rows they did not keep
    // from the tensor they are writing.
    const auto backward = [&](bool persistent, const k::BatchNormStats& stats, const Tensor& relu_y, bool add,
                              bool from_x, bool in_place = false) {
      const Tensor grad = in_place ? dy.clone() : dy;
      const Tensor over = in_place ? grad : empty_like(x);
      const k::BatchNormGrads g{.dx = add ? empty_like(x) : over,
                                .dresidual = add ? over : Tensor(),
                                .dweight = params(),
                                .dbias = params()};
      const k::ReluMaskFromX mask{.on = from_x, .bias = from_x ? b : Tensor()};
      if (persistent) {
        EXPECT_TRUE(k::batch_norm_backward_persistent(grad, x, w, stats, g, relu_y, mask));
      } else {
        k::batch_norm_backward_kernel(grad, x, w, stats, g, relu_y, mask);
      }
      return g;
    };
    const Tolerance out = c.dtype == kFloat16    ? Tolerance{2e-3, 2e-3}
                          : c.dtype == kBFloat16 ? Tolerance{1e-2, 1e-2}
                                                 : Tolerance{1e-5, 1e-5};
    const Tolerance par{1e-4, 1e-4};
    for (int fused : {0, 1, 2}) {
      const std::string what = context(variant_name(fused), c.dtype, "streamed");
      const Tensor zf = fused == 2 ? z : Tensor();
      k::BatchNormStats stats[2];
      Tensor y[2], rm[2], rv[2];
      for (int p : {0, 1}) forward(p == 1, zf, fused != 0, stats[p], y[p], rm[p], rv[p]);
      const auto expect_close = [&](const Tensor& a, const Tensor& e, Tolerance t, const std::string& name) {
        EXPECT_TRUE(matches_cpu(a, e.to(Device::cpu()), t)) << what << " " << name;
      };
      expect_close(y[1], y[0], out, "y");
      expect_close(stats[1].mean, stats[0].mean, par, "mean");
      expect_close(stats[1].invstd, stats[0].invstd, par, "invstd");
      expect_close(rm[1], rm[0], par, "running_mean");
      expect_close(rv[1], rv[0], par, "running_var");
      // relu(bn(x) + z) reads its mask from y and writes dz; relu(bn(x)) also recomputes it from x.
      std::vector<std::pair<bool, const char*>> masks = {{false, fused == 0 ? "plain" : "mask from y"}};
      if (fused == 1) masks.push_back({true, "mask from x"});
      for (const auto& [from_x, mask] : masks) {
        const Tensor relu_y = fused == 0 || from_x ? Tensor() : y[1];
        const k::BatchNormGrads two_pass = backward(false, stats[1], relu_y, fused == 2, from_x);
        const k::BatchNormGrads persistent = backward(true, stats[1], relu_y, fused == 2, from_x);
        expect_close(persistent.dx, two_pass.dx, out, std::string(mask) + " dx");
        expect_close(persistent.dweight, two_pass.dweight, par, std::string(mask) + " dweight");
        expect_close(persistent.dbias, two_pass.dbias, par, std::string(mask) + " dbias");
        if (fused == 2) expect_close(persistent.dresidual, two_pass.dresidual, Tolerance{0, 0}, "dz");
        const k::BatchNormGrads in_place = backward(true, stats[1], relu_y, fused == 2, from_x, true);
        expect_close(in_place.dx, two_pass.dx, out, std::string(mask) + " dx, in place");
        if (fused == 2) expect_close(in_place.dresidual, two_pass.dresidual, Tolerance{0, 0}, "dz, in place");
      }
      if (fused != 0 || c.dtype != kFloat32) continue;
      const BnRun cpu = run_batch_norm(h.x, h.w, h.b, h.rm, h.rv, h.g, Device::cpu(), {.momentum = 0.3});
      expect_close(y[1], cpu.y, output_tolerance(c.dtype), "y against the CPU");
      const k::BatchNormGrads g = backward(true, stats[1], {}, false, false);
      expect_close(g.dx, cpu.dx, output_tolerance(c.dtype), "dx against the CPU");
      expect_close(g.dweight, cpu.dw, param_tolerance(c.dtype), "dweight against the CPU");
    }
  }
}

// The cooperative launch inside stream capture: a captured relu(bn(x) + z) forward and backward
// replays on new data with the results of eager calls.
TEST(CudaPersistentBatchNorm, ACapturedBatchNormReplaysOnNewData) {
  SKIP_WITHOUT_GPU();
  const PersistentBatchNorm on(true);
  uint64_t seed = test_seed();
  const Shape shape = {8, 64, 14, 14};
  const Inputs first = make_inputs(shape, kBFloat16, seed), second = make_inputs(shape, kBFloat16, seed);
  Tensor w = to_cuda(first.w).requires_grad_(true), b = to_cuda(first.b).requires_grad_(true);
  Tensor x = to_cuda(first.x).requires_grad_(true), z = to_cuda(first.z).requires_grad_(true);
  const Tensor g = to_cuda(first.g).contiguous(MemoryFormat::ChannelsLast);
  Tensor rm = to_cuda(first.rm), rv = to_cuda(first.rv);
  const auto step = [&] {
    Tensor y = batch_norm_add_relu(x, z, w, b, rm, rv, {.momentum = 0.3});
    y.backward(g);
    return y;
  };
  const auto clear_grads = [&] {
    for (Tensor* t : {&x, &z, &w, &b}) t->set_grad(Tensor());
  };
  cuda::Stream side = cuda::stream_from_pool();
  cuda::Graph graph;
  Tensor y;
  {
    cuda::StreamGuard guard(side);
    step();  // warm-up outside the capture
    clear_grads();
    side.synchronize();
    graph.capture_begin();
    y = step();
    graph.capture_end();
  }
  ASSERT_TRUE(graph.captured());
  // Replay on the second inputs, from the running statistics the capture left.
  {
    NoGradGuard no_grad;
    x.copy_(to_cuda(second.x));
    z.copy_(to_cuda(second.z));
  }
  const Tensor rm_before = rm.clone(), rv_before = rv.clone();
  graph.replay();
  cuda::current_stream().synchronize();
  const BnRun eager =
      run_batch_norm(second.x, first.w, first.b, rm_before.to(Device::cpu()), rv_before.to(Device::cpu()),
                     first.g, Device::cuda(), {.momentum = 0.3}, second.z, 2);
  const Tolerance exact{0, 0};
  EXPECT_TRUE(matches_cpu(y, eager.y.to(Device::cpu()), exact)) << "y";
  EXPECT_TRUE(matches_cpu(x.grad(), eager.dx.to(Device::cpu()), exact)) << "dx";
  EXPECT_TRUE(matches_cpu(z.grad(), eager.dz.to(Device::cpu()), exact)) << "dz";
  EXPECT_TRUE(matches_cpu(w.grad(), eager.dw.to(Device::cpu()), exact)) << "dweight";
  EXPECT_TRUE(matches_cpu(rm, eager.running_mean.to(Device::cpu()), exact)) << "running_mean";
  EXPECT_TRUE(matches_cpu(rv, eager.running_var.to(Device::cpu()), exact)) << "running_var";
}

}  // namespace
}  // namespace nabla
