// CUDA matrix products (cuBLASLt) against a float64 CPU reference computed from the same
// (rounded) inputs: mm, bmm, matmul with every rank combination and broadcast, linear with and
// without bias, for every floating dtype; transposed operands read in place, operands that
// must be copied first, empty inner dims, TF32 on and off, and gradients.
//
// Tolerances: float32 without TF32 rounds only the float32 accumulation (1e-5 relative, plus
// an absolute part that grows like sqrt(K) for sums of K signed products); TF32 and the 16-bit
// dtypes round their inputs to about 10 mantissa bits (1e-2).
#include <cmath>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

Tolerance gemm_tolerance(DType dtype, int64_t k, bool tf32 = false) {
  const double scale = std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
  double base = 1e-2;
  if (dtype == kFloat64) base = 1e-12;
  if (dtype == kFloat32 && !tf32) base = 1e-5;
  return {base, base * scale};
}

// The product of the CUDA operands' CPU copies, in float64, rounded to the operands' dtype.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  return matmul(a.cpu().to(kFloat64), b.cpu().to(kFloat64)).to(a.dtype());
}

Tensor transposed(const Tensor& t) {
  return t.transpose(-1, -2);
}

Tensor same(const Tensor& t) {
  return t;
}

struct Operands {
  Shape a, b;
  std::function<Tensor(const Tensor&)> view_a = same;
  std::function<Tensor(const Tensor&)> view_b = same;
};

TEST(CudaParityLinalg, MatmulMatchesTheReferenceForEveryRankLayoutAndDtype) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  const std::vector<std::pair<const char*, Operands>> cases = {
      {"mm odd sizes", {{37, 53}, {53, 29}}},
      {"mm a transposed", {{53, 37}, {53, 29}, transposed}},
      {"mm b transposed (as in linear)", {{37, 53}, {29, 53}, same, transposed}},
      {"mm both transposed", {{53, 37}, {29, 53}, transposed, transposed}},
      {"mm large", {{256, 512}, {512, 384}}},
      {"mm a strided (copied)", {{37, 106}, {53, 29}, [](const Tensor& t) { return t.slice(1, 0, 106, 2); }}},
      {"mm unaligned offset",
       {{1, 37 * 53 + 1},
        {53, 29},
        [](const Tensor& t) {
          return t.narrow(1, 1, 37 * 53).view({37, 53});
        }}},
      {"bmm", {{6, 17, 33}, {6, 33, 21}}},
      {"bmm transposed operands", {{6, 33, 17}, {6, 21, 33}, transposed, transposed}},
      {"batched @ matrix (folded)", {{4, 5, 17, 33}, {33, 21}}},
      {"matrix @ batched (b broadcast)", {{17, 33}, {4, 33, 21}}},
      {"broadcast batch dims (host loop)", {{2, 1, 17, 33}, {3, 33, 21}}},
      {"expanded batch",
       {{1, 17, 33},
        {5, 33, 21},
        [](const Tensor& t) {
          return t.expand({5, 17, 33});
        }}},
      {"vector @ matrix", {{33}, {33, 21}}},
      {"matrix @ vector", {{17, 33}, {33}}},
      {"dot", {{33}, {33}}},
      {"batched @ vector", {{3, 17, 33}, {33}}},
      {"vector @ batched", {{33}, {3, 33, 21}}},
      {"rows and columns of one", {{1, 33}, {33, 1}}},
  };
  uint64_t seed = test_seed();
  for (const auto& [name, ops] : cases) {
    Tensor a64 = random_input(ops.a, ++seed), b64 = random_input(ops.b, ++seed);
    for (DType dtype : kFloatDTypes) {
      Tensor a = ops.view_a(to_cuda(a64.to(dtype))), b = ops.view_b(to_cuda(b64.to(dtype)));
      const int64_t k = b.dim() == 1 ? b.size(0) : b.size(-2);
      EXPECT_TRUE(matches_cpu(matmul(a, b), reference_matmul(a, b), gemm_tolerance(dtype, k)))
          << context(name, dtype);
    }
  }
}

TEST(CudaParityLinalg, MmAndBmmMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {
    Tensor a = random_input({40, 70}, ++seed, dtype), b = random_input({70, 30}, ++seed, dtype);
    EXPECT_TRUE(matches_cpu(mm(to_cuda(a), to_cuda(b)), mm(a, b), gemm_tolerance(dtype, 70)))
        << context("mm", dtype);
    Tensor p = random_input({3, 40, 70}, ++seed, dtype), q = random_input({3, 30, 70}, ++seed, dtype);
    EXPECT_TRUE(matches_cpu(bmm(to_cuda(p), transposed(to_cuda(q))), bmm(p, transposed(q)),
                            gemm_tolerance(dtype, 70)))
        << context("bmm", dtype);
  }
}

TEST(CudaParityLinalg, LinearWithAndWithoutBiasMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  uint64_t seed = test_seed();
  for (const Shape& x_shape : {Shape{64, 120}, Shape{4, 7, 120}, Shape{120}, Shape{1, 120}}) {
    Tensor x64 = random_input(x_shape, ++seed), w64 = random_input({90, 120}, ++seed),
           b64 = random_input({90}, ++seed);
    for (DType dtype : kFloatDTypes) {
      Tensor x = to_cuda(x64.to(dtype)), w = to_cuda(w64.to(dtype)), bias = to_cuda(b64.to(dtype));
      Tensor expected = linear(x.cpu().to(kFloat64), w.cpu().to(kFloat64));
      const Tolerance tol = gemm_tolerance(dtype, 120);
      EXPECT_TRUE(matches_cpu(linear(x, w), expected.to(dtype), tol)) << context("linear", dtype);
      Tensor with_bias = (expected + bias.cpu().to(kFloat64)).to(dtype);
      EXPECT_TRUE(matches_cpu(linear(x, w, bias), with_bias, tol)) << context("linear + bias", dtype);
      // A strided bias and a transposed input take the same path after a copy / in place.
      Tensor wide_bias = to_cuda(random_input({90, 2}, seed, dtype)).select(1, 0);
      Tensor expected_wide = (expected + wide_bias.cpu().to(kFloat64)).to(dtype);
      EXPECT_TRUE(matches_cpu(linear(x, w, wide_bias), expected_wide, tol)) << context("strided bias", dtype);
    }
  }
}

TEST(CudaParityLinalg, EmptyInnerDimsGiveZerosOrTheBias) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes) {
    Tensor a = to_cuda(Tensor::empty({5, 0}, {.dtype = dtype})),
           b = to_cuda(Tensor::empty({0, 7}, {.dtype = dtype}));
    EXPECT_TRUE(matches_cpu(matmul(a, b), zeros({5, 7}, {.dtype = dtype}))) << context("k = 0", dtype);
    Tensor w = to_cuda(Tensor::empty({7, 0}, {.dtype = dtype}));
    Tensor bias = random_input({7}, test_seed(), dtype);
    EXPECT_TRUE(matches_cpu(linear(a, w, to_cuda(bias)), bias.expand({5, 7}).contiguous()))
        << context("linear k = 0", dtype);
    EXPECT_EQ(
        matmul(to_cuda(Tensor::empty({0, 4}, {.dtype = dtype})), to_cuda(random_input({4, 3}, 1, dtype)))
            .sizes(),
        (Shape{0, 3}));
  }
}

// The default routes multiply float32 in float32; a guard with matmul_tf32 puts TF32 in force,
// and cuBLAS then rounds the inputs, which shows in the error against float64.
TEST(CudaParityLinalg, Tf32IsOffByDefaultAndAGuardTurnsItOn) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(routes().matmul_tf32);
  uint64_t seed = test_seed();
  // Large K makes TF32's 10-bit inputs show: its error is far above float32's.
  Tensor a = to_cuda(random_input({128, 4096}, ++seed, kFloat32)),
         b = to_cuda(random_input({4096, 96}, ++seed, kFloat32));
  Tensor expected = reference_matmul(a, b);
  Tensor exact = matmul(a, b);
  EXPECT_TRUE(matches_cpu(exact, expected, gemm_tolerance(kFloat32, 4096)));
  // Linear follows the routes too: its float32 result against float64, with TF32 off and on.
  const Tensor w = to_cuda(random_input({64, 4096}, ++seed, kFloat32));
  const Tensor linear_expected = linear(a.cpu().to(kFloat64), w.cpu().to(kFloat64)).to(kFloat32);
  const Tensor linear_exact = linear(a, w);
  Tensor fast, linear_fast;
  {
    Routes tf32 = routes();
    tf32.matmul_tf32 = true;
    const RoutesGuard guard(tf32);
    fast = matmul(a, b);
    EXPECT_TRUE(matches_cpu(fast, expected, gemm_tolerance(kFloat32, 4096, /*tf32=*/true)));
    linear_fast = linear(a, w);
    EXPECT_TRUE(matches_cpu(linear_fast, linear_expected, gemm_tolerance(kFloat32, 4096, true)));
  }
  const auto error = [](const Tensor& actual, const Tensor& reference) {
    return max(abs(actual - to_cuda(reference))).item<double>();
  };
  const double exact_error = error(exact, expected), fast_error = error(fast, expected);
  EXPECT_GT(fast_error, 4 * exact_error)
      << "TF32 on should round the inputs (errors " << fast_error << " vs " << exact_error << ")";
  const double linear_exact_error = error(linear_exact, linear_expected);
  EXPECT_GT(error(linear_fast, linear_expected), 4 * linear_exact_error) << "linear under the TF32 guard";
  EXPECT_TRUE(matches_cpu(matmul(a, b), expected, gemm_tolerance(kFloat32, 4096)))
      << "the guard's end restores float32";
}

TEST(CudaParityLinalg, GradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tolerance tol = gemm_tolerance(dtype, 64);
    // matmul with broadcasting and a 1-d operand.
    for (const auto& [sa, sb] : std::vector<std::pair<Shape, Shape>>{
             {{3, 17, 33}, {33, 21}}, {{2, 1, 17, 33}, {3, 33, 21}}, {{33}, {4, 33, 21}}, {{17, 33}, {33}}}) {
      Tensor a0 = random_input(sa, ++seed, dtype), b0 = random_input(sb, ++seed, dtype);
      Tensor a = a0.detach().requires_grad_(true), b = b0.detach().requires_grad_(true);
      Tensor ad = to_cuda(a0).requires_grad_(true), bd = to_cuda(b0).requires_grad_(true);
      Tensor y = matmul(a, b);
      Tensor g = random_input(y.sizes(), ++seed, dtype);
      y.backward(g);
      matmul(ad, bd).backward(to_cuda(g));
      EXPECT_TRUE(matches_cpu(ad.grad(), a.grad(), tol))
          << "matmul grad a " << shape_str(sa) << dtype_name(dtype);
      EXPECT_TRUE(matches_cpu(bd.grad(), b.grad(), tol))
          << "matmul grad b " << shape_str(sb) << dtype_name(dtype);
    }
    // linear with bias.
    Tensor x0 = random_input({4, 6, 64}, ++seed, dtype), w0 = random_input({20, 64}, ++seed, dtype),
           b0 = random_input({20}, ++seed, dtype);
    Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true),
           b = b0.detach().requires_grad_(true);
    Tensor xd = to_cuda(x0).requires_grad_(true), wd = to_cuda(w0).requires_grad_(true),
           bd = to_cuda(b0).requires_grad_(true);
    Tensor g = random_input({4, 6, 20}, ++seed, dtype);
    linear(x, w, b).backward(g);
    linear(xd, wd, bd).backward(to_cuda(g));
    EXPECT_TRUE(matches_cpu(xd.grad(), x.grad(), tol)) << "linear grad x " << dtype_name(dtype);
    EXPECT_TRUE(matches_cpu(wd.grad(), w.grad(), gemm_tolerance(dtype, 24)))
        << "linear grad w " << dtype_name(dtype);
    EXPECT_TRUE(matches_cpu(bd.grad(), b.grad(), gemm_tolerance(dtype, 24)))
        << "linear grad bias " << dtype_name(dtype);
    // A column-major weight (GPT-2's Conv1D: the transpose of an (in, out) parameter): its
    // gradient comes from the transposed product, the bias gradient from the other operand's
    // epilogue sums.
    Tensor wt0 = random_input({64, 20}, ++seed, dtype);
    Tensor wt = wt0.detach().requires_grad_(true), wtd = to_cuda(wt0).requires_grad_(true);
    Tensor b2 = b0.detach().requires_grad_(true), b2d = to_cuda(b0).requires_grad_(true);
    linear(x0, wt.t(), b2).backward(g);
    linear(to_cuda(x0), wtd.t(), b2d).backward(to_cuda(g));
    EXPECT_TRUE(matches_cpu(wtd.grad(), wt.grad(), gemm_tolerance(dtype, 24)))
        << "linear grad column-major w " << dtype_name(dtype);
    EXPECT_TRUE(matches_cpu(b2d.grad(), b2.grad(), gemm_tolerance(dtype, 24)))
        << "linear grad bias, column-major w " << dtype_name(dtype);
  }
}

TEST(CudaParityLinalg, SixteenBitLinearBiasGradientsFromTheEpilogueMatchTheCpu) {
  // ops/linalg.cpp weight_gradient: in float16/bfloat16 (as under autocast) the bias gradient
  // comes from the weight-gradient product's cuBLASLt epilogue sums, for a row-major weight
  // (BGRADB) and a column-major one (BGRADA, GPT-2's Conv1D); the reference is float64 on the CPU.
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat16, kBFloat16}) {
    for (bool column_major : {false, true}) {
      const Tensor x0 = random_input({3, 37, 64}, ++seed, dtype),
                   g = random_input({3, 37, 48}, ++seed, dtype);
      const Tensor w0 =
          column_major ? random_input({64, 48}, ++seed, dtype) : random_input({48, 64}, ++seed, dtype);
      const Tensor b0 = random_input({48}, ++seed, dtype);
      Tensor w = to_cuda(w0).requires_grad_(true), b = to_cuda(b0).requires_grad_(true);
      linear(to_cuda(x0), column_major ? w.t() : w, b).backward(to_cuda(g));
      const Tensor g64 = g.to(kFloat64).reshape({-1, 48}), x64 = x0.to(kFloat64).reshape({-1, 64});
      const Tensor gw = matmul(g64.t(), x64);  // (48, 64)
      const std::string what =
          std::string(dtype_name(dtype)) + (column_major ? " column-major" : " row-major");
      EXPECT_TRUE(matches_cpu(w.grad(), (column_major ? gw.t() : gw).contiguous().to(dtype),
                              gemm_tolerance(dtype, 111)))
          << "weight " << what;
      EXPECT_TRUE(matches_cpu(b.grad(), g64.sum({0}).to(dtype), gemm_tolerance(dtype, 111)))
          << "bias " << what;
    }
  }
}

// One input read by three linear layers (attention's q, k and v projections): the later layers'
// input gradients accumulate into the sum so far in the GEMM (beta = 1; ops/linalg.cpp
// input_gradient_plus) instead of adding it in a pass of their own. The reference is the sum of
// the three products in float64 on the CPU; the 16-bit sum is rounded once per product.
TEST(CudaParityLinalg, ALinearInputSharedByThreeLayersSumsItsGradientInTheGemm) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
    const Tensor x0 = random_input({2, 33, 64}, ++seed, dtype);
    std::vector<Tensor> ws, gs;
    Tensor x = to_cuda(x0).requires_grad_(true);
    Tensor h = x * 1.0;  // a non-leaf: its gradient is summed by the engine, not a leaf accumulator
    Tensor loss;
    Tensor expected = zeros({2, 33, 64}, {.dtype = kFloat64});
    for (int64_t out : {48, 16, 16}) {
      ws.push_back(random_input({out, 64}, ++seed, dtype));
      gs.push_back(random_input({2, 33, out}, ++seed, dtype));
      const Tensor term = (linear(h, to_cuda(ws.back())) * to_cuda(gs.back()).to(kFloat32)).sum();
      loss = loss.defined() ? loss + term : term;
      expected = expected + matmul(gs.back().to(kFloat64), ws.back().to(kFloat64));
    }
    loss.backward();
    const double tolerance = dtype == kFloat32 ? 1e-5 : 3e-2;
    EXPECT_TRUE(matches_cpu(x.grad(), expected.to(dtype), Tolerance{tolerance, tolerance * 8}))
        << dtype_name(dtype);
  }
}

// linear's GELU activation: in float16/bfloat16 cuBLASLt's GELU_AUX_BIAS epilogue writes the
// activation and keeps the pre-activation for the backward (the node must be the fused one, so
// the epilogue really ran); the reference is gelu_tanh(x w^T + b) and its gradients in float64
// on the CPU. Float32 takes the composition, equal to linear then gelu on the same GPU.
TEST(CudaParityLinalg, LinearGeluEpilogueMatchesTheComposition) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  // 48 outputs take the epilogue; 45 (no multiple of 8, which the pre-activation's leading
  // dimension must be) compose, with results as close.
  for (DType dtype : {kFloat16, kBFloat16, kFloat32}) {
    for (const auto& [with_bias, out] : {std::pair{true, 48}, {false, 48}, {true, 45}}) {
      const Tensor x0 = random_input({3, 37, 64}, ++seed, dtype),
                   g = random_input({3, 37, out}, ++seed, dtype);
      const Tensor w0 = random_input({out, 64}, ++seed, dtype), b0 = random_input({out}, ++seed, dtype);
      Tensor x = to_cuda(x0).requires_grad_(true), w = to_cuda(w0).requires_grad_(true),
             b = with_bias ? to_cuda(b0).requires_grad_(true) : Tensor();
      const Tensor y = linear(x, w, b, Activation::gelu_tanh);
      y.backward(to_cuda(g));
      const std::string what = std::string(dtype_name(dtype)) + (with_bias ? " with bias" : " without bias") +
                               " out " + std::to_string(out);
      if (dtype == kFloat32) {
        Tensor xr = to_cuda(x0).requires_grad_(true), wr = to_cuda(w0).requires_grad_(true),
               br = with_bias ? to_cuda(b0).requires_grad_(true) : Tensor();
        const Tensor yr = gelu(linear(xr, wr, br), {.tanh_approximation = true});
        yr.backward(to_cuda(g));
        EXPECT_TRUE(all_close(y, yr, 0, 0)) << what;
        EXPECT_TRUE(all_close(x.grad(), xr.grad(), 0, 0)) << what;
        EXPECT_TRUE(all_close(w.grad(), wr.grad(), 0, 0)) << what;
        continue;
      }
      ASSERT_TRUE(y.grad_fn());
      EXPECT_EQ(y.grad_fn()->name(), out % 8 == 0 ? "LinearGeluBackward" : "GeluBackward") << what;
      Tensor x64 = x0.to(kFloat64).requires_grad_(true), w64 = w0.to(kFloat64).requires_grad_(true),
             b64 = with_bias ? b0.to(kFloat64).requires_grad_(true) : Tensor();
      const Tensor y64 = gelu(linear(x64, w64, b64), {.tanh_approximation = true});
      y64.backward(g.to(kFloat64));
      const Tolerance tol = gemm_tolerance(dtype, 64);
      EXPECT_TRUE(matches_cpu(y, y64.to(dtype), tol)) << "y " << what;
      EXPECT_TRUE(matches_cpu(x.grad(), x64.grad().to(dtype), gemm_tolerance(dtype, 111))) << "dx " << what;
      EXPECT_TRUE(matches_cpu(w.grad(), w64.grad().to(dtype), gemm_tolerance(dtype, 111))) << "dw " << what;
      if (with_bias) {
        EXPECT_TRUE(matches_cpu(b.grad(), b64.grad().to(dtype), gemm_tolerance(dtype, 111))) << "db " << what;
      }
    }
  }
}

}  // namespace
}  // namespace nabla
