// Reductions: values against plain-loop references over fresh random inputs in several layouts
// and dtypes, gradients against finite differences (float64 gradcheck), and the errors users see.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using Group = std::vector<double>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A float64 tensor of `values` in row-major order (0-d when `sizes` is empty).
Tensor from_values(const std::vector<double>& values, const Shape& sizes) {
  Tensor t = Tensor::empty(sizes, {.dtype = kFloat64});
  std::copy(values.begin(), values.end(), t.data_ptr<double>());
  return t;
}

// Applies fn to the values that reduce into each output position and lays the results out with
// the reduced dims kept (size 1) or dropped. Values of a group come in row-major order, so along
// a single reduced dim the i-th value sits at index i. An empty dims list reduces every dim.
Tensor reference(const Tensor& x, const Shape& dims, bool keepdim,
                 const std::function<double(const Group&)>& fn) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, dims.empty());
  for (int64_t d : dims) reduced[d < 0 ? d + nd : d] = true;
  Shape keep = x.sizes(), dropped;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) {
      keep[d] = 1;
    } else {
      dropped.push_back(x.size(d));
    }
  }
  std::vector<Group> groups(numel_of(keep));
  const std::vector<double> v = x.to(kFloat64).to_vector<double>();
  Shape coord(nd, 0);
  for (double value : v) {
    int64_t k = 0;
    for (int64_t d = 0; d < nd; ++d) k = k * keep[d] + (reduced[d] ? 0 : coord[d]);
    groups[k].push_back(value);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++coord[d] < x.size(d)) break;
      coord[d] = 0;
    }
  }
  std::vector<double> out;
  for (const Group& g : groups) out.push_back(fn(g));
  return from_values(out, keepdim ? keep : dropped);
}

double ref_sum(const Group& g) {
  return std::accumulate(g.begin(), g.end(), 0.0);
}
double ref_mean(const Group& g) {
  return ref_sum(g) / static_cast<double>(g.size());
}

// Two passes: the mean, then the squared deviations from it.
std::function<double(const Group&)> ref_var(int64_t correction) {
  return [correction](const Group& g) {
    const double m = ref_mean(g);
    double ss = 0;
    for (double v : g) ss += (v - m) * (v - m);
    return ss / std::max<double>(0.0, static_cast<double>(g.size()) - static_cast<double>(correction));
  };
}

std::function<double(const Group&)> ref_norm(double p) {
  return [p](const Group& g) {
    double acc = p == -kInf ? kInf : 0.0;
    for (double v : g) {
      const double a = std::abs(v);
      if (p == kInf)
        acc = std::max(acc, a);
      else if (p == -kInf)
        acc = std::min(acc, a);
      else if (p == 0)
        acc += a != 0;
      else
        acc += std::pow(a, p);
    }
    return std::isinf(p) || p == 0 ? acc : std::pow(acc, 1.0 / p);
  };
}

// Position of the first maximum (or minimum); the first NaN wins.
int64_t ref_arg(const Group& g, bool is_max) {
  int64_t best = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return static_cast<int64_t>(i);
    if (is_max ? g[i] > g[best] : g[i] < g[best]) best = static_cast<int64_t>(i);
  }
  return best;
}
double ref_max(const Group& g) {
  return g[ref_arg(g, true)];
}
double ref_min(const Group& g) {
  return g[ref_arg(g, false)];
}

// The same logical (2, 3, 4, 5) shape in four layouts, each with fresh values.
std::vector<std::pair<std::string, Tensor>> layouts(uint64_t seed, DType dtype) {
  return {
      {"contiguous", random_input({2, 3, 4, 5}, seed, dtype)},
      {"transposed", random_input({2, 4, 3, 5}, seed + 1, dtype).transpose(1, 2)},
      {"channels_last", random_input({2, 3, 4, 5}, seed + 2, dtype).contiguous(MemoryFormat::ChannelsLast)},
      {"strided slice", random_input({2, 6, 4, 5}, seed + 3, dtype).slice(1, 0, 6, 2)},
  };
}

const std::vector<Shape> kDimsLists = {{}, {0}, {1}, {-1}, {0, 2, 3}, {1, 3}, {2, -1}, {-4, 1, 2, 3}};

struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(DType dtype) {
  if (dtype == kFloat64) return {1e-12, 1e-12};
  if (dtype == kFloat32) return {1e-5, 1e-5};
  return {2e-2, 5e-2};  // float16 / bfloat16: the result is rounded to 8-11 bits
}

// Checks op(x, dims, keepdim) against the reference for every layout, dims list and keepdim.
void check_against_reference(const std::function<Tensor(const Tensor&, const Shape&, bool)>& op,
                             const std::function<double(const Group&)>& ref, std::vector<DType> dtypes) {
  uint64_t seed = testing::test_seed();
  for (DType dtype : dtypes) {
    const Tolerance tol = tolerance_for(dtype);
    for (const auto& [layout, x] : layouts(seed += 10, dtype)) {
      for (const Shape& dims : kDimsLists) {
        for (bool keepdim : {false, true}) {
          Tensor out = op(x, dims, keepdim);
          EXPECT_EQ(out.dtype(), dtype);
          EXPECT_TRUE(all_close(out, reference(x, dims, keepdim, ref), tol.rtol, tol.atol))
              << dtype_name(dtype) << " " << layout << " dims " << shape_str(dims) << " keepdim " << keepdim;
        }
      }
    }
  }
}

const std::vector<DType> kFloatingDTypes = {kFloat64, kFloat32, kFloat16, kBFloat16};

TEST(Reduce, SumMatchesLoopReferenceForEveryLayoutAndDimsList) {
  check_against_reference([](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }, ref_sum,
                          kFloatingDTypes);
}

TEST(Reduce, MeanMatchesLoopReferenceForEveryLayoutAndDimsList) {
  check_against_reference([](const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); }, ref_mean,
                          kFloatingDTypes);
}

TEST(Reduce, VarWithCorrectionMatchesTwoPassReference) {
  for (int64_t correction : {0, 1}) {
    check_against_reference(
        [correction](const Tensor& x, const Shape& d, bool k) { return var(x, d, correction, k); },
        ref_var(correction), kFloatingDTypes);
  }
}

TEST(Reduce, NormMatchesReferenceForEveryP) {
  for (double p : {2.0, 1.0, 3.0, 0.5, 0.0, kInf, -kInf}) {
    check_against_reference([p](const Tensor& x, const Shape& d, bool k) { return norm(x, p, d, k); },
                            ref_norm(p), {kFloat64, kFloat32, kBFloat16});
  }
}

TEST(Reduce, SumOfIntegersAndBoolsIsExactInt64) {
  Generator gen(testing::test_seed());
  Tensor x = randint(-1000, 1000, {6, 7, 5}, {.dtype = kInt32}, &gen).transpose(0, 2);
  for (const Shape& dims : std::vector<Shape>{{}, {0}, {1, 2}, {-1}}) {
    Tensor s = sum(x, dims);
    EXPECT_EQ(s.dtype(), kInt64);
    EXPECT_TRUE(all_close(s, reference(x, dims, false, ref_sum), 0, 0)) << shape_str(dims);
  }
  Tensor b = gt(random_input({4, 9}, testing::test_seed() + 1), 0.0);
  Tensor count = sum(b, {1});
  EXPECT_EQ(count.dtype(), kInt64);
  EXPECT_TRUE(all_close(count, reference(b, {1}, false, ref_sum), 0, 0));
}

TEST(Reduce, HalfAndBFloat16AccumulateInFloat) {
  // 8192 positive values: a 16-bit running sum would stall once its spacing passes the values.
  for (DType dtype : {kFloat16, kBFloat16}) {
    Tensor x = abs(random_input({8192}, testing::test_seed(), dtype));
    const double expected = ref_sum(x.to(kFloat64).to_vector<double>());
    const double ulp = dtype == kFloat16 ? 1.0 / 1024 : 1.0 / 128;  // relative spacing of the result
    EXPECT_NEAR(sum(x).item<double>(), expected, expected * ulp) << dtype_name(dtype);
    EXPECT_NEAR(mean(x).item<double>(), expected / 8192, expected / 8192 * ulp) << dtype_name(dtype);
  }
}

TEST(Reduce, LargeReductionsMatchReferenceOnEveryParallelSplit) {
  // Sizes past the parallel threshold: one output (R split over threads), many outer rows, and
  // blocks of a wide inner dim.
  Tensor flat = random_input({1 << 20}, testing::test_seed(), kFloat32);
  EXPECT_TRUE(all_close(sum(flat), reference(flat, {}, false, ref_sum), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(var(flat), reference(flat, {}, false, ref_var(1)), 1e-6, 0));
  EXPECT_TRUE(all_close(norm(flat, kInf), reference(flat, {}, false, ref_norm(kInf)), 0, 0));
  EXPECT_TRUE(all_close(max(flat), reference(flat, {}, false, ref_max), 0, 0));
  Tensor wide = random_input({512, 300}, testing::test_seed() + 1, kFloat64);
  for (int64_t dim : {0, 1}) {
    EXPECT_TRUE(all_close(sum(wide, {dim}), reference(wide, {dim}, false, ref_sum), 1e-12, 1e-12));
    EXPECT_TRUE(all_close(var(wide, {dim}), reference(wide, {dim}, false, ref_var(1)), 1e-10, 1e-12));
    auto [values, indices] = min(wide, dim);
    EXPECT_TRUE(all_close(values, reference(wide, {dim}, false, ref_min), 0, 0));
    EXPECT_TRUE(all_close(
        indices, reference(wide, {dim}, false, [](const Group& g) { return ref_arg(g, false); }), 0, 0));
  }
}

TEST(Reduce, VarWithCorrectionAtLeastNGivesNanOrInf) {
  Tensor one = random_input({3, 1}, testing::test_seed());
  for (double v : var(one, {1}).to_vector<double>()) EXPECT_TRUE(std::isnan(v));  // 0 / 0
  Tensor two = random_input({3, 2}, testing::test_seed() + 1);
  for (double v : var(two, {1}, /*correction=*/2).to_vector<double>()) EXPECT_EQ(v, kInf);
  EXPECT_TRUE(std::isnan(mean(zeros({0, 4}, {.dtype = kFloat64})).item<double>()));
  EXPECT_EQ(sum(zeros({0, 4}, {.dtype = kFloat64}), {0}).sizes(), (Shape{4}));
}

TEST(Reduce, MaxAndMinAlongDimMatchReferenceWithIndices) {
  for (DType dtype : {kFloat64, kFloat32, kBFloat16, kInt64}) {
    for (const auto& [layout, x_float] : layouts(testing::test_seed(), kFloat64)) {
      Tensor x = dtype == kInt64 ? (x_float * 100.0).to(kInt64) : x_float.to(dtype);
      for (int64_t dim : {0, 1, 2, -1}) {
        for (bool keepdim : {false, true}) {
          for (bool is_max : {true, false}) {
            auto [values, indices] = is_max ? max(x, dim, keepdim) : min(x, dim, keepdim);
            EXPECT_EQ(values.dtype(), dtype);
            EXPECT_EQ(indices.dtype(), kInt64);
            EXPECT_TRUE(all_close(values, reference(x, {dim}, keepdim, is_max ? ref_max : ref_min), 0, 0))
                << layout << " dim " << dim << " max " << is_max;
            auto arg = [is_max](const Group& g) { return static_cast<double>(ref_arg(g, is_max)); };
            EXPECT_TRUE(all_close(indices, reference(x, {dim}, keepdim, arg), 0, 0))
                << layout << " dim " << dim << " max " << is_max;
            Tensor a = is_max ? argmax(x, dim, keepdim) : argmin(x, dim, keepdim);
            EXPECT_TRUE(all_close(a, indices, 0, 0));
          }
        }
      }
    }
  }
}

TEST(Reduce, MaxAlongDimReturnsFirstIndexOnTiesAndNanWins) {
  Tensor x = tensor<double>({1, 3, 3, 0, 5, kNaN, 5, kNaN, -1, -1, 2, 2}, {3, 4});
  auto [max_values, max_indices] = max(x, 1);
  auto [min_values, min_indices] = min(x, 1);
  EXPECT_EQ(max_indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(min_indices.to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 0}));
  EXPECT_TRUE(all_close(max_values, tensor<double>({3, kNaN, 2}), 0, 0));
  EXPECT_TRUE(all_close(min_values, tensor<double>({0, kNaN, -1}), 0, 0));
  EXPECT_TRUE(std::isnan(max(x).item<double>()));
  EXPECT_TRUE(std::isnan(min(x).item<double>()));
  EXPECT_EQ(argmax(x).item<int64_t>(), 5);
}

TEST(Reduce, MaxMinAndArgOfAllElementsMatchReference) {
  for (const auto& [layout, x] : layouts(testing::test_seed(), kFloat32)) {
    EXPECT_TRUE(all_close(max(x), reference(x, {}, false, ref_max), 0, 0)) << layout;
    EXPECT_TRUE(all_close(min(x), reference(x, {}, false, ref_min), 0, 0)) << layout;
    // Flattened in logical (row-major) order, whatever the layout.
    auto first = [](bool is_max) { return [is_max](const Group& g) { return double(ref_arg(g, is_max)); }; };
    EXPECT_TRUE(all_close(argmax(x), reference(x, {}, false, first(true)), 0, 0)) << layout;
    EXPECT_TRUE(all_close(argmin(x), reference(x, {}, false, first(false)), 0, 0)) << layout;
    EXPECT_EQ(argmax(x, std::nullopt, /*keepdim=*/true).sizes(), (Shape{1, 1, 1, 1}));
  }
}

TEST(Reduce, SumToReducesBroadcastDimsAndKeepsMatchingShapes) {
  Tensor x = random_input({2, 3, 4}, testing::test_seed());
  EXPECT_TRUE(sum_to(x, {2, 3, 4}).is_same(x));
  EXPECT_TRUE(all_close(sum_to(x, {3, 1}), reference(x, {0, 2}, true, ref_sum).view({3, 1})));
  EXPECT_TRUE(all_close(sum_to(x, {4}), reference(x, {0, 1}, false, ref_sum)));
  EXPECT_TRUE(all_close(sum_to(x, {1, 3, 4}), reference(x, {0}, true, ref_sum)));
  EXPECT_TRUE(all_close(sum_to(x, {}), reference(x, {}, false, ref_sum)));
}

TEST(Reduce, ReductionsOfA0dTensorAcceptDimZero) {
  Tensor x = random_input({1}, testing::test_seed()).view({});
  EXPECT_TRUE(all_close(sum(x, {0}), x));
  EXPECT_TRUE(all_close(mean(x, {-1}, true), x));
  auto [value, index] = max(x, 0);
  EXPECT_TRUE(all_close(value, x));
  EXPECT_EQ(index.item<int64_t>(), 0);
}

// ---- gradients -------------------------------------------------------------------------------

// Each op is checked on contiguous, transposed and channels_last float64 leaves.
void expect_gradcheck(const std::function<Tensor(const Tensor&)>& fn, const std::string& what) {
  const uint64_t seed = testing::test_seed();
  std::vector<std::pair<std::string, Tensor>> inputs = {
      {"contiguous", random_input({2, 3, 2, 3}, seed, kFloat64)},
      {"transposed", random_input({2, 2, 3, 3}, seed + 1, kFloat64).transpose(1, 2)},
      {"channels_last",
       random_input({2, 3, 2, 3}, seed + 2, kFloat64).contiguous(MemoryFormat::ChannelsLast)},
  };
  for (auto& [layout, x] : inputs) {
    x.requires_grad_(true);
    auto result = gradcheck([&](const TensorList& in) { return fn(in[0]); }, {x}, {.seed = seed});
    EXPECT_TRUE(result) << what << " on " << layout << ": " << result.message;
  }
}

TEST(ReduceGrad, SumAndMeanPassFiniteDifferenceCheck) {
  for (const Shape& dims : std::vector<Shape>{{}, {1}, {0, 2, 3}, {-1}}) {
    for (bool keepdim : {false, true}) {
      const std::string what = "dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
      expect_gradcheck([&](const Tensor& x) { return sum(x, dims, keepdim); }, "sum " + what);
      expect_gradcheck([&](const Tensor& x) { return mean(x, dims, keepdim); }, "mean " + what);
    }
  }
}

TEST(ReduceGrad, VarPassesFiniteDifferenceCheckForCorrectionZeroAndOne) {
  for (int64_t correction : {0, 1}) {
    for (const Shape& dims : std::vector<Shape>{{}, {1}, {0, 2, 3}}) {
      expect_gradcheck([&](const Tensor& x) { return var(x, dims, correction, false); },
                       "var correction " + std::to_string(correction) + " dims " + shape_str(dims));
    }
  }
  expect_gradcheck([](const Tensor& x) { return var(x, {2}, 1, true); }, "var keepdim");
}

TEST(ReduceGrad, NormPassesFiniteDifferenceCheckForEveryP) {
  for (double p : {1.0, 2.0, 3.0, kInf, -kInf}) {
    for (const Shape& dims : std::vector<Shape>{{}, {1}, {0, 2, 3}}) {
      expect_gradcheck([&](const Tensor& x) { return norm(x, p, dims, false); },
                       "norm p " + std::to_string(p) + " dims " + shape_str(dims));
    }
  }
  expect_gradcheck([](const Tensor& x) { return norm(x, 2.0, {-1}, true); }, "norm keepdim");
}

TEST(ReduceGrad, NormOfZerosHasZeroGradientNotNan) {
  for (double p : {2.0, 3.0}) {
    Tensor x = zeros({2, 3}, {.dtype = kFloat64, .requires_grad = true});
    norm(x, p, {1}).sum().backward();
    EXPECT_TRUE(all_close(x.grad(), zeros({2, 3}, {.dtype = kFloat64}), 0, 0)) << "p " << p;
  }
}

TEST(ReduceGrad, NormDoubleBackwardMatchesClosedForm) {
  // d/dx (w . x / |x|) = w / |x| - x (x . w) / |x|^3: the second derivative needs the norm's
  // own history inside the first backward (create_graph).
  Tensor x = random_input({5}, testing::test_seed(), kFloat64, /*requires_grad=*/true);
  Tensor w = random_input({5}, testing::test_seed() + 1, kFloat64);
  autograd::backward({norm(x)}, {}, {.create_graph = true});
  Tensor first = x.grad();
  x.set_grad(Tensor());
  sum(first * w).backward();
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  double n2 = 0, xw = 0;
  for (size_t i = 0; i < xv.size(); ++i) n2 += xv[i] * xv[i], xw += xv[i] * wv[i];
  const double n = std::sqrt(n2);
  std::vector<double> expected;
  for (size_t i = 0; i < xv.size(); ++i) expected.push_back(wv[i] / n - xv[i] * xw / (n2 * n));
  EXPECT_TRUE(all_close(x.grad(), from_values(expected, {5}), 1e-12, 1e-12));
}

TEST(ReduceGrad, MaxAndMinPassFiniteDifferenceCheck) {
  expect_gradcheck([](const Tensor& x) { return max(x); }, "max of all");
  expect_gradcheck([](const Tensor& x) { return min(x); }, "min of all");
  for (int64_t dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      const std::string what = " dim " + std::to_string(dim) + (keepdim ? " keepdim" : "");
      expect_gradcheck([&](const Tensor& x) { return max(x, dim, keepdim).first; }, "max" + what);
      expect_gradcheck([&](const Tensor& x) { return min(x, dim, keepdim).first; }, "min" + what);
    }
  }
}

TEST(ReduceGrad, MaxOfAllSplitsGradientEvenlyAmongTies) {
  Tensor x =
      tensor<double>({1, 4, 4, -2, 4, 0}, {2, 3}, TensorOptions{.dtype = kFloat64, .requires_grad = true});
  (max(x) * 6.0).backward();
  EXPECT_TRUE(all_close(x.grad(), tensor<double>({0, 2, 2, 0, 2, 0}, {2, 3}), 0, 1e-15));
}

TEST(ReduceGrad, SumToPassesFiniteDifferenceCheck) {
  for (const Shape& target : std::vector<Shape>{{3, 1, 1}, {1, 3, 1, 3}, {3}, {}}) {
    expect_gradcheck([&](const Tensor& x) { return sum_to(x, target); }, "sum_to " + shape_str(target));
  }
}

// ---- errors ----------------------------------------------------------------------------------

TEST(Reduce, ErrorsNameTheOpAndWhatWasExpected) {
  Tensor x = random_input({2, 3, 4}, testing::test_seed(), kFloat32);
  EXPECT_NABLA_ERROR(sum(x, {3}), "sum", "dim 3", "out of range");
  EXPECT_NABLA_ERROR(mean(x, {-4}), "mean", "dim -4", "out of range");
  EXPECT_NABLA_ERROR(var(x, {0, -3}), "var", "more than once");
  EXPECT_NABLA_ERROR(max(x, 5), "max", "dim 5", "out of range");
  EXPECT_NABLA_ERROR(argmin(x, -4), "argmin", "out of range");
  Tensor empty = zeros({0, 3});
  EXPECT_NABLA_ERROR(max(empty), "max", "non-empty", "float32[0, 3]");
  EXPECT_NABLA_ERROR(min(empty, 0), "min", "dim 0", "no elements");
  EXPECT_NABLA_ERROR(argmax(empty), "argmax", "non-empty");
  EXPECT_NABLA_ERROR(norm(empty, kInf, {0}), "norm", "no identity");
  Tensor ints = randint(0, 5, {2, 3});
  EXPECT_NABLA_ERROR(mean(ints), "mean", "floating-point", "int64[2, 3]");
  EXPECT_NABLA_ERROR(var(ints), "var", "floating-point");
  EXPECT_NABLA_ERROR(norm(ints), "norm", "floating-point");
  EXPECT_NABLA_ERROR(sum_to(x, {4, 4}), "sum_to", "float32[2, 3, 4]", "[4, 4]");
  EXPECT_NABLA_ERROR(sum_to(x, {1, 2, 3, 4}), "sum_to", "[1, 2, 3, 4]");
}

}  // namespace
}  // namespace nabla
