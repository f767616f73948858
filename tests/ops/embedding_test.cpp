// embedding on the CPU: rows picked for indices of any shape, the weight gradient summed over
// repeated indices (against loops), padding_idx rows without gradient, float64 gradcheck and
// double backward, reduced precision and the error messages.
#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

Tensor random_indices(const Shape& sizes, int64_t rows, uint64_t seed) {
  Generator gen(seed);
  return randint(0, rows, sizes, {.dtype = kInt64}, &gen);
}

TEST(Embedding, PicksTheWeightRowOfEveryIndexForAnyIndexShape) {
  uint64_t seed = test_seed();
  const Tensor w = random_input({10, 4}, ++seed);
  const std::vector<double> wv = w.to_vector<double>();
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 5}, Shape{2, 2, 3}, Shape{0, 3}}) {
    const Tensor idx = random_indices(shape, 10, ++seed);
    const std::vector<int64_t> iv = idx.to_vector<int64_t>();
    std::vector<double> want;
    for (int64_t i : iv)
      for (int64_t d = 0; d < 4; ++d) want.push_back(wv[i * 4 + d]);
    Shape out_shape(shape);
    out_shape.push_back(4);
    EXPECT_TRUE(all_close(embedding(w, idx), tensor<double>(want, out_shape), 0, 0)) << shape_str(shape);
    EXPECT_TRUE(all_close(embedding(w.t().contiguous().t(), idx), tensor<double>(want, out_shape), 0, 0))
        << "column-major weight " << shape_str(shape);
  }
}

TEST(Embedding, WeightGradientSumsRepeatedIndicesAndSkipsPaddingRows) {
  uint64_t seed = test_seed();
  const Tensor idx = tensor<int64_t>({1, 3, 1, 0, 3, 3, 2, 0}, {2, 4});
  const Tensor g = random_input({2, 4, 3}, ++seed);
  const std::vector<int64_t> iv = idx.to_vector<int64_t>();
  const std::vector<double> gv = g.to_vector<double>();
  for (int64_t padding_idx : {-1, 3, 0}) {
    Tensor w = random_input({5, 3}, ++seed, kFloat64, true);
    embedding(w, idx, {.padding_idx = padding_idx}).backward(g);
    std::vector<double> want(15, 0.0);
    for (size_t k = 0; k < iv.size(); ++k) {
      if (iv[k] == padding_idx) continue;
      for (int64_t d = 0; d < 3; ++d) want[iv[k] * 3 + d] += gv[k * 3 + d];
    }
    EXPECT_TRUE(all_close(w.grad(), tensor<double>(want, {5, 3}), 1e-15, 0)) << "padding_idx " << padding_idx;
  }
}

TEST(Embedding, GradientAndDoubleBackwardMatchFiniteDifferences) {
  uint64_t seed = test_seed();
  const Tensor w = random_input({6, 3}, ++seed, kFloat64, true);
  const Tensor idx = tensor<int64_t>({5, 0, 5, 2, 1, 5}, {3, 2});
  GradcheckResult r = gradcheck([&](const TensorList& in) { return embedding(in[0], idx); }, {w});
  EXPECT_TRUE(r.ok) << r.message;
  // The weight gradient as a function of the incoming gradient, with a padding row.
  const Tensor go = random_input({3, 2, 3}, ++seed, kFloat64, true);
  GradcheckResult twice = gradcheck(
      [&](const TensorList& in) {
        EnableGradGuard enable;
        Tensor leaf = w.detach().clone().requires_grad_(true);
        autograd::backward({embedding(leaf, idx, {.padding_idx = 2})}, {in[0]}, {.create_graph = true});
        return leaf.grad();
      },
      {go});
  EXPECT_TRUE(twice.ok) << twice.message;
}

TEST(Embedding, ReducedPrecisionKeepsTheWeightDtype) {
  const Tensor w = random_input({8, 5}, test_seed());
  const Tensor idx = random_indices({4, 3}, 8, test_seed() + 1);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    Tensor wl = w.to(dtype).requires_grad_(true);
    Tensor y = embedding(wl, idx);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_TRUE(all_close(y, embedding(w, idx).to(dtype), 0, 0));
    y.sum().backward();
    EXPECT_EQ(wl.grad().dtype(), dtype);
  }
}

TEST(Embedding, Float16GradientOfAFrequentRowIsSummedInFloat32) {
  // 3000 tokens of row 0: a float16 running sum would stop at 2048.
  Tensor w = ones({2, 3}, {.dtype = kFloat16, .requires_grad = true});
  embedding(w, zeros({3000}, {.dtype = kInt64})).sum().backward();
  EXPECT_TRUE(all_close(w.grad(), tensor<double>({3000, 3000, 3000, 0, 0, 0}, {2, 3}), 0, 0));
  EXPECT_EQ(w.grad().dtype(), kFloat16);
}

TEST(Embedding, BadArgumentsGiveClearErrors) {
  const Tensor w = random_input({5, 3}, test_seed());
  EXPECT_NABLA_ERROR(embedding(w, tensor<int64_t>({0, 5}, {2})), "embedding", "index 5", "[5, 3]",
                     "0 <= index < 5");
  EXPECT_NABLA_ERROR(embedding(w, tensor<int64_t>({-1, 2}, {2})), "embedding", "index -1");
  EXPECT_NABLA_ERROR(embedding(w, tensor<int32_t>({0, 1}, {2})), "embedding", "int64 indices", "int32");
  EXPECT_NABLA_ERROR(embedding(w.view({15}), tensor<int64_t>({0}, {1})), "embedding", "2-d weight", "[15]");
  EXPECT_NABLA_ERROR(embedding(w, tensor<int64_t>({0}, {1}), {.padding_idx = 5}), "embedding", "padding_idx",
                     "5");
}

}  // namespace
}  // namespace nabla
