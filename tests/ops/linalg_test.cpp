// Matrix products: matmul/mm/bmm/linear against naive loops over host doubles, in every shape
// case numpy defines (1-d, 2-d, broadcast batches), on strided operands and in every floating
// dtype; float64 gradchecks for each; and the errors users see.
#include <functional>

#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

// numpy matmul by definition: 1-d operands promoted, batch dims broadcast, a triple loop per
// batch entry, on row-major host doubles.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to(kFloat64).to_vector<double>(), bv = b.to(kFloat64).to_vector<double>();
  Shape as = a.sizes(), bs = b.sizes();
  if (a.dim() == 1) as.insert(as.begin(), 1);
  if (b.dim() == 1) bs.push_back(1);
  const int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  const size_t nb = std::max(as.size(), bs.size()) - 2;
  Shape a_batch(nb, 1), b_batch(nb, 1), batch(nb);
  std::copy(as.begin(), as.end() - 2, a_batch.end() - (as.size() - 2));
  std::copy(bs.begin(), bs.end() - 2, b_batch.end() - (bs.size() - 2));
  for (size_t d = 0; d < nb; ++d) batch[d] = std::max(a_batch[d], b_batch[d]);
  const int64_t count = numel_of(batch);
  std::vector<double> out(static_cast<size_t>(count * n * m), 0.0);
  for (int64_t e = 0; e < count; ++e) {
    // Unravel e over the broadcast batch; a size-1 batch dim of an operand always reads entry 0.
    int64_t rest = e, a_entry = 0, b_entry = 0, a_scale = 1, b_scale = 1;
    for (int64_t d = static_cast<int64_t>(nb) - 1; d >= 0; --d) {
      int64_t i = rest % batch[d];
      rest /= batch[d];
      a_entry += (a_batch[d] == 1 ? 0 : i) * a_scale;
      b_entry += (b_batch[d] == 1 ? 0 : i) * b_scale;
      a_scale *= a_batch[d];
      b_scale *= b_batch[d];
    }
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < m; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < k; ++j)
          acc += av[a_entry * n * k + r * k + j] * bv[b_entry * k * m + j * m + c];
        out[e * n * m + r * m + c] = acc;
      }
    }
  }
  Shape sizes = batch;
  if (a.dim() > 1) sizes.push_back(n);
  if (b.dim() > 1) sizes.push_back(m);
  if (sizes.empty()) return tensor<double>(out, {1}).view({});
  return tensor<double>(out, sizes);
}

struct ShapePair {
  Shape a, b;
};

TEST(Linalg, MatmulOfMatricesMatchesNaiveLoops) {
  uint64_t seed = test_seed();
  for (const auto& [as, bs] : std::vector<ShapePair>{
           {{3, 4}, {4, 5}}, {{1, 7}, {7, 1}}, {{17, 33}, {33, 9}}, {{64, 80}, {80, 96}}}) {
    Tensor a = random_input(as, ++seed), b = random_input(bs, ++seed);
    EXPECT_TRUE(all_close(matmul(a, b), reference_matmul(a, b), 1e-12, 1e-12))
        << shape_str(as) << shape_str(bs);
    EXPECT_TRUE(all_close(mm(a, b), reference_matmul(a, b), 1e-12, 1e-12));
  }
}

TEST(Linalg, MatmulReadsTransposedSlicedAndExpandedOperands) {
  uint64_t seed = test_seed();
  Tensor a_t = random_input({5, 3}, ++seed).t();                       // (3, 5), column-major
  Tensor b_t = random_input({6, 5}, ++seed).t();                       // (5, 6), column-major
  Tensor a_step = random_input({3, 10}, ++seed).slice(1, 0, 10, 2);    // (3, 5), column stride 2
  Tensor b_row = random_input({1, 6}, ++seed).expand({5, 6});          // (5, 6), row stride 0
  Tensor a_batch_t = random_input({2, 5, 3}, ++seed).transpose(1, 2);  // (2, 3, 5)
  Tensor b_perm = random_input({6, 2, 5}, ++seed).permute({1, 2, 0});  // (2, 5, 6)
  for (const auto& [a, b] : std::vector<std::pair<Tensor, Tensor>>{
           {a_t, b_t}, {a_step, b_t}, {a_t, b_row}, {a_step, b_row}, {a_batch_t, b_perm}, {a_batch_t, b_t}}) {
    EXPECT_TRUE(all_close(matmul(a, b), reference_matmul(a, b), 1e-12, 1e-12))
        << describe(a) << " strides " << shape_str(a.strides()) << " @ " << describe(b) << " strides "
        << shape_str(b.strides());
  }
}

TEST(Linalg, MatmulBroadcastsBatchDimsAndPromotesVectors) {
  uint64_t seed = test_seed();
  const std::vector<ShapePair> cases = {
      {{4}, {4}},                 // dot product, 0-d result
      {{3, 4}, {4}},              // matrix-vector
      {{4}, {4, 5}},              // vector-matrix
      {{2, 3, 4}, {4}},           // batched matrix-vector
      {{4}, {2, 4, 5}},           // vector-batched matrix
      {{2, 3, 4}, {4, 5}},        // only a batched: folded into one product
      {{3, 4}, {2, 4, 5}},        // only b batched
      {{2, 1, 3, 4}, {5, 4, 2}},  // both batched, broadcast
      {{1, 3, 4}, {6, 4, 2}},     // size-1 batch dim of a broadcasts
      {{2, 3, 0}, {0, 5}},        // empty inner dim gives zeros
  };
  for (const auto& [as, bs] : cases) {
    Tensor a = random_input(as, ++seed), b = random_input(bs, ++seed);
    Tensor out = matmul(a, b);
    Tensor expected = reference_matmul(a, b);
    EXPECT_EQ(out.sizes(), expected.sizes()) << shape_str(as) << " @ " << shape_str(bs);
    EXPECT_TRUE(all_close(out, expected, 1e-12, 1e-12)) << shape_str(as) << " @ " << shape_str(bs);
  }
  EXPECT_EQ(matmul(random_input({4}, seed + 1), random_input({4}, seed + 2)).dim(), 0);
}

TEST(Linalg, MatmulInEveryFloatingDtypeMatchesAFloat64Reference) {
  uint64_t seed = test_seed();
  struct Case {
    DType dtype;
    double rtol, atol;
  };
  // The reference uses the same (rounded) inputs, so only accumulation and output rounding differ.
  for (const auto& [dtype, rtol, atol] : std::vector<Case>{{kFloat64, 1e-12, 1e-12},
                                                           {kFloat32, 1e-5, 1e-4},
                                                           {kFloat16, 2e-3, 2e-2},
                                                           {kBFloat16, 1e-2, 1e-1}}) {
    for (const auto& [as, bs] :
         std::vector<ShapePair>{{{7, 64}, {64, 9}}, {{3, 5, 64}, {64}}, {{2, 4, 64}, {2, 64, 3}}}) {
      Tensor a = random_input(as, ++seed, dtype), b = random_input(bs, ++seed, dtype);
      Tensor out = matmul(a, b);
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_TRUE(all_close(out, reference_matmul(a, b), rtol, atol))
          << dtype_name(dtype) << " " << shape_str(as);
      if (b.dim() > 1) {
        // Transposed operands: (b^T a^T) read as column-major matrices.
        Tensor bt = b.transpose(-1, -2), at = a.transpose(-1, -2);
        EXPECT_TRUE(all_close(matmul(bt, at), reference_matmul(bt, at), rtol, atol)) << dtype_name(dtype);
      }
    }
  }
}

TEST(Linalg, BmmMultipliesEachBatchEntry) {
  uint64_t seed = test_seed();
  Tensor a = random_input({4, 3, 5}, ++seed), b = random_input({4, 5, 2}, ++seed);
  EXPECT_TRUE(all_close(bmm(a, b), reference_matmul(a, b), 1e-12, 1e-12));
  Tensor at = random_input({4, 5, 3}, ++seed).transpose(1, 2);
  EXPECT_TRUE(all_close(bmm(at, b), reference_matmul(at, b), 1e-12, 1e-12));
  // Enough entries to run one product per thread.
  Tensor many_a = random_input({64, 6, 7}, ++seed, kFloat32),
         many_b = random_input({64, 7, 5}, ++seed, kFloat32);
  EXPECT_TRUE(all_close(bmm(many_a, many_b), reference_matmul(many_a, many_b), 1e-5, 1e-5));
}

TEST(Linalg, LinearIsInputTimesTransposedWeightPlusBias) {
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 : dtype == kFloat16 ? 1e-2 : 5e-2;
    for (const Shape& xs : {Shape{6}, Shape{5, 6}, Shape{2, 3, 6}}) {
      Tensor x = random_input(xs, ++seed, dtype);
      Tensor w = random_input({4, 6}, ++seed, dtype);
      Tensor bias = random_input({4}, ++seed, dtype);
      Tensor no_bias = reference_matmul(x, w.t());
      EXPECT_TRUE(all_close(linear(x, w), no_bias, tol, tol)) << dtype_name(dtype) << shape_str(xs);
      std::vector<double> expected = no_bias.to_vector<double>(), bv = bias.to(kFloat64).to_vector<double>();
      for (size_t i = 0; i < expected.size(); ++i) expected[i] += bv[i % 4];
      Tensor out = linear(x, w, bias);
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_TRUE(all_close(out, tensor<double>(expected, no_bias.sizes()), tol, tol)) << dtype_name(dtype);
    }
  }
}

TEST(Linalg, MatmulGradientsPassGradcheckInEveryShapeCase) {
  uint64_t seed = test_seed();
  const std::vector<ShapePair> cases = {
      {{4}, {4}},
      {{3, 4}, {4}},
      {{4}, {4, 5}},
      {{3, 4}, {4, 2}},
      {{2, 3, 4}, {4}},
      {{4}, {2, 4, 3}},
      {{2, 3, 4}, {4, 2}},
      {{3, 4}, {2, 4, 2}},
      {{2, 1, 3, 4}, {3, 4, 2}},
      {{1, 2, 4}, {3, 4, 2}},
  };
  for (const auto& [as, bs] : cases) {
    Tensor a = random_input(as, ++seed, kFloat64, true), b = random_input(bs, ++seed, kFloat64, true);
    auto fn = [](const TensorList& in) { return matmul(in[0], in[1]); };
    auto result = gradcheck(fn, {a, b});
    EXPECT_TRUE(result) << shape_str(as) << " @ " << shape_str(bs) << ": " << result.message;
  }
}

TEST(Linalg, MmBmmAndLinearGradientsPassGradcheckWithStridedInputs) {
  uint64_t seed = test_seed();
  // Non-contiguous leaves: transposed views of fresh tensors.
  Tensor a = random_input({4, 3}, ++seed).t();
  Tensor b = random_input({5, 4}, ++seed).t();
  a.requires_grad_(true);
  b.requires_grad_(true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return mm(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return mm(in[1].t(), in[0].t()); }, {a, b}));

  Tensor ba = random_input({2, 3, 4}, ++seed, kFloat64, true),
         bb = random_input({2, 5, 4}, ++seed, kFloat64, true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return bmm(in[0], in[1].transpose(1, 2)); }, {ba, bb}));

  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    Tensor x = random_input(xs, ++seed, kFloat64, true);
    Tensor w = random_input({5, 4}, ++seed, kFloat64, true);
    Tensor bias = random_input({5}, ++seed, kFloat64, true);
    auto with_bias =
        gradcheck([](const TensorList& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias});
    EXPECT_TRUE(with_bias) << shape_str(xs) << ": " << with_bias.message;
    auto without_bias = gradcheck([](const TensorList& in) { return linear(in[0], in[1]); }, {x, w});
    EXPECT_TRUE(without_bias) << shape_str(xs) << ": " << without_bias.message;
  }
  // A transposed input and a weight read through a transposed view.
  Tensor xt = random_input({4, 3}, ++seed, kFloat64, true);
  Tensor wt = random_input({4, 5}, ++seed, kFloat64, true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return linear(in[0].t(), in[1].t()); }, {xt, wt}));
}

TEST(Linalg, MatmulBackwardWithCreateGraphGivesSecondDerivatives) {
  uint64_t seed = test_seed();
  Tensor a = random_input({3, 4}, ++seed, kFloat64, true);
  Tensor b = random_input({4, 5}, ++seed);
  Tensor y = matmul(a, b);
  autograd::backward({sum(y * y)}, {}, {.retain_graph = true, .create_graph = true});
  Tensor grad_a = a.grad();  // NOLINT(performance-unnecessary-copy-initialization): a.grad() is reset below
  // grad_a = 2 (a b) b^T, itself differentiable.
  ASSERT_TRUE(grad_a.requires_grad());
  a.set_grad(Tensor());
  sum(grad_a).backward();
  // d/da sum(2 a b b^T) = 2 * ones(3, 4) @ (b b^T)
  Tensor bbt = reference_matmul(b, b.t());
  Tensor expected = reference_matmul(full({3, 4}, 2.0, {.dtype = kFloat64}), bbt);
  EXPECT_TRUE(all_close(a.grad(), expected, 1e-10, 1e-10));
}

// linear with an activation is act(linear(...)) (on the CPU, the composition itself), and
// gelu_backward is gelu's derivative: both against float64 autograd of the composition.
TEST(Linalg, LinearGeluEqualsTheCompositionAndGeluBackwardIsItsDerivative) {
  uint64_t seed = test_seed();
  const Tensor x0 = random_input({2, 5, 7}, ++seed, kFloat64), w0 = random_input({3, 7}, ++seed, kFloat64),
               b0 = random_input({3}, ++seed, kFloat64), g = random_input({2, 5, 3}, ++seed, kFloat64);
  TensorList results[2];
  for (int fused = 0; fused < 2; ++fused) {
    const Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true),
                 b = b0.detach().requires_grad_(true);
    const Tensor y =
        fused ? linear(x, w, b, Activation::gelu_tanh) : gelu(linear(x, w, b), {.tanh_approximation = true});
    y.backward(g);
    results[fused] = {y, x.grad(), w.grad(), b.grad()};
  }
  for (size_t k = 0; k < 4; ++k) EXPECT_TRUE(all_close(results[1][k], results[0][k], 1e-12, 1e-12)) << k;
  for (const bool tanh : {false, true}) {
    const Tensor x = x0.detach().requires_grad_(true);
    gelu(x, {.tanh_approximation = tanh}).backward(x0 * 0.5 + 1.0);
    EXPECT_TRUE(
        all_close(gelu_backward(x0 * 0.5 + 1.0, x0, {.tanh_approximation = tanh}), x.grad(), 1e-12, 1e-12))
        << "tanh " << tanh;
  }
  nn::Linear fc({.in = 7, .out = 3, .activation = Activation::gelu_tanh});
  EXPECT_TRUE(all_close(fc(x0.to(kFloat32)),
                        gelu(linear(x0.to(kFloat32), fc.weight, fc.bias), {.tanh_approximation = true}), 0,
                        0));
}

TEST(Linalg, ShapeMismatchErrorsNameBothShapes) {
  Tensor a = random_input({2, 3}, test_seed()), b = random_input({4, 5}, test_seed() + 1);
  EXPECT_NABLA_ERROR(matmul(a, b), "matmul", "[2, 3]", "[4, 5]", "3 columns", "4 rows");
  EXPECT_NABLA_ERROR(matmul(random_input({3}, 1), random_input({4}, 2)), "matmul", "[3]", "[4]");
  EXPECT_NABLA_ERROR(matmul(random_input({2, 3, 4}, 1), random_input({3, 4, 5}, 2)), "matmul", "batch dims",
                     "[2, 3, 4]", "[3, 4, 5]");
  EXPECT_NABLA_ERROR(mm(random_input({2, 3, 4}, 1), random_input({4, 5}, 2)), "mm", "2-d", "[2, 3, 4]");
  EXPECT_NABLA_ERROR(bmm(random_input({2, 3, 4}, 1), random_input({3, 4, 5}, 2)), "bmm",
                     "batch sizes differ");
  EXPECT_NABLA_ERROR(bmm(random_input({3, 4}, 1), random_input({4, 5}, 2)), "bmm", "3-d");
  EXPECT_NABLA_ERROR(linear(random_input({2, 3}, 1), random_input({5, 4}, 2)), "linear", "[2, 3]", "[5, 4]");
  EXPECT_NABLA_ERROR(linear(random_input({2, 4}, 1), random_input({5, 4}, 2), random_input({4}, 3)), "linear",
                     "bias", "[5]", "[4]");
}

TEST(Linalg, IntegerAndMixedDtypeOperandsAreRejected) {
  Tensor i = arange(6, {.dtype = kInt64}).view({2, 3});
  EXPECT_NABLA_ERROR(matmul(i, i.t()), "matmul", "int64", "floating-point");
  Tensor f32 = random_input({2, 3}, 1, kFloat32), f64 = random_input({3, 2}, 2, kFloat64);
  EXPECT_NABLA_ERROR(matmul(f32, f64), "matmul", "one dtype", "float32", "float64");
  EXPECT_NABLA_ERROR(linear(f32, random_input({4, 3}, 3, kFloat64)), "linear", "one dtype");
}

}  // namespace
}  // namespace nabla
