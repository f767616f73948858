// CUDA sort, topk, cumsum, pad and multinomial against the CPU: CUB's segmented radix sort must
// give the CPU's stable order (ties included) in every dtype, cumsum the CPU's running sums
// (forward and backward), pad the same tensor in every mode, and multinomial on the GPU the
// same distribution (a GPU generator's stream differs from the CPU's, so counts are compared).
#include <map>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

TEST(CudaParitySort, SortAndTopkMatchTheCpuInEveryDtypeWithTies) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{7, 33}, Shape{3, 1000}, Shape{2, 3, 5}, Shape{1, 4097}}) {
      // Rounded values repeat, so ties are common; the stable order must match exactly.
      const Tensor x = random_values(shape, ++seed, dtype);
      for (bool descending : {false, true}) {
        const auto [v, i] = sort(x, {.dim = -1, .descending = descending});
        const auto [vd, id] = sort(to_cuda(x), {.dim = -1, .descending = descending});
        EXPECT_TRUE(matches_cpu(vd, v, Tolerance{0, 0})) << context("sort values", dtype) << shape_str(shape);
        EXPECT_TRUE(matches_cpu(id, i, Tolerance{0, 0}))
            << context("sort indices", dtype) << shape_str(shape);
      }
      if (shape.size() == 3) {
        const auto [v0, i0] = sort(x, {.dim = 1});
        const auto [vd0, id0] = sort(to_cuda(x), {.dim = 1});
        EXPECT_TRUE(matches_cpu(id0, i0, Tolerance{0, 0})) << context("sort dim 1", dtype);
      }
    }
  }
  const Tensor big = random_values({16, 50304}, ++seed, kBFloat16);
  const auto [t, ti] = topk(big, 50);
  const auto [td, tid] = topk(to_cuda(big), 50);
  EXPECT_TRUE(matches_cpu(td, t, Tolerance{0, 0}));
  EXPECT_TRUE(matches_cpu(tid, ti, Tolerance{0, 0}));
}

TEST(CudaParitySort, CumsumForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{5, 7}, Shape{3, 100}, Shape{2, 3, 70}, Shape{1, 3000}}) {
      const Tensor x = random_values(shape, ++seed, dtype);
      for (int64_t dim : {0, -1}) {
        const Tolerance tol = dtype == kFloat32 ? Tolerance{1e-5, 1e-5} : tolerance_for(dtype);
        EXPECT_TRUE(matches_cpu(cumsum(to_cuda(x), dim), cumsum(x, dim), tol))
            << context("cumsum", dtype) << shape_str(shape) << " dim " << dim;
      }
    }
  }
  const Tensor x = random_values({4, 300}, ++seed, kFloat32);
  const Tensor g = random_values({4, 300}, ++seed, kFloat32);
  Tensor grads[2];
  for (int d = 0; d < 2; ++d) {
    const Tensor xi = (d == 0 ? x : to_cuda(x)).detach().requires_grad_(true);
    cumsum(xi, 1).backward(d == 0 ? g : to_cuda(g));
    grads[d] = xi.grad();
  }
  EXPECT_TRUE(matches_cpu(grads[1], grads[0], Tolerance{1e-5, 1e-5}));
}

TEST(CudaParitySort, PadAndMultinomial) {
  SKIP_WITHOUT_GPU();
  const Tensor x = random_values({2, 3, 6, 7}, test_seed(), kFloat32);
  for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    const std::vector<int64_t> pads = {2, 3, 1, 4};
    EXPECT_TRUE(
        matches_cpu(pad(to_cuda(x), pads, {.mode = mode}), pad(x, pads, {.mode = mode}), Tolerance{0, 0}));
  }
  Generator gen(test_seed());
  const int64_t draws = 20000;
  const Tensor p = tensor<float>({0.2f, 0.0f, 0.5f, 0.3f}).to(Device::cuda()).unsqueeze(0).expand({draws, 4});
  const auto got = multinomial(p.contiguous(), 1, {.generator = &gen}).cpu().to_vector<int64_t>();
  std::map<int64_t, int64_t> count;
  for (int64_t c : got) ++count[c];
  EXPECT_EQ(count[1], 0);
  for (auto [c, prob] : {std::pair<int64_t, double>{0, 0.2}, {2, 0.5}, {3, 0.3}}) {
    EXPECT_NEAR(static_cast<double>(count[c]), prob * draws, 5 * std::sqrt(draws * prob * (1 - prob))) << c;
  }
}

}  // namespace
}  // namespace nabla
