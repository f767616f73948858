// batch_norm (and its fused ReLU / add + ReLU variants) and layer_norm on the CPU: forwards
// and running-stat updates against plain-loop references, in every layout and mode, float64
// gradcheck of every input, reduced-precision dtypes and the error messages.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// Per channel of a (N, C, *) tensor: the mean and the biased and unbiased variances.
struct ChannelStats {
  std::vector<double> mean, var, unbiased;
};

ChannelStats loop_stats(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  const std::vector<double> v = x.to(kFloat64).contiguous().to_vector<double>();
  ChannelStats st{std::vector<double>(c), std::vector<double>(c), std::vector<double>(c)};
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sum += v[(i * c + ch) * s + k];
    const double m = sum / static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sq += (v[(i * c + ch) * s + k] - m) * (v[(i * c + ch) * s + k] - m);
    st.mean[ch] = m;
    st.var[ch] = sq / static_cast<double>(n * s);
    st.unbiased[ch] = sq / static_cast<double>(n * s - 1);
  }
  return st;
}

std::vector<double> values_or(const Tensor& t, int64_t n, double fallback) {
  return t.defined() ? t.to(kFloat64).to_vector<double>() : std::vector<double>(n, fallback);
}

// (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c], element by element, as float64.
Tensor loop_normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                      const Tensor& w, const Tensor& b, double eps) {
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  const std::vector<double> v = x.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> wv = values_or(w, c, 1.0), bv = values_or(b, c, 0.0);
  std::vector<double> y(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < s; ++k) {
        const int64_t at = (i * c + ch) * s + k;
        y[at] = (v[at] - mean[ch]) / std::sqrt(var[ch] + eps) * wv[ch] + bv[ch];
      }
  return tensor<double>(y, x.sizes());
}

std::vector<double> blend(const Tensor& running, const std::vector<double>& batch, double momentum) {
  std::vector<double> r = running.to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < r.size(); ++i) r[i] = (1 - momentum) * r[i] + momentum * batch[i];
  return r;
}

Tensor positive(const Shape& sizes, uint64_t seed, DType dtype = kFloat64) {
  return abs(random_input(sizes, seed, dtype));
}

struct Layout {
  std::string name;
  Tensor x;
};

std::vector<Layout> layouts(uint64_t seed, DType dtype) {
  return {
      {"contiguous (N, C, H, W)", random_input({3, 4, 5, 6}, seed, dtype)},
      {"channels_last", random_input({3, 4, 5, 6}, seed + 1, dtype).contiguous(MemoryFormat::ChannelsLast)},
      {"(N, C)", random_input({7, 5}, seed + 2, dtype)},
      {"(N, C, L)", random_input({2, 3, 9}, seed + 3, dtype)},
      {"transposed", random_input({4, 3, 5, 6}, seed + 4, dtype).transpose(0, 1)},
      {"large H * W (one task per channel)", random_input({2, 3, 100, 90}, seed + 5, dtype)},
  };
}

TEST(BatchNorm, TrainingNormalizesWithBatchStatsAndUpdatesRunningStatsWithUnbiasedVariance) {
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat64, kFloat32}) {
    const double tol = dtype == kFloat64 ? 1e-12 : 2e-5;
    for (const auto& [name, x] : layouts(seed += 10, dtype)) {
      const int64_t c = x.size(1);
      Tensor w = random_input({c}, ++seed, dtype), b = random_input({c}, ++seed, dtype);
      Tensor rm = random_input({c}, ++seed, dtype), rv = positive({c}, ++seed, dtype);
      const Tensor rm0 = rm.clone(), rv0 = rv.clone();
      const double momentum = 0.3, eps = 1e-3;
      Tensor y = batch_norm(x, w, b, rm, rv, {.training = true, .momentum = momentum, .eps = eps});
      const ChannelStats st = loop_stats(x);
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_TRUE(all_close(y, loop_normalize(x, st.mean, st.var, w, b, eps), tol, tol)) << name;
      EXPECT_TRUE(all_close(rm, tensor<double>(blend(rm0, st.mean, momentum), {c}), tol, tol)) << name;
      EXPECT_TRUE(all_close(rv, tensor<double>(blend(rv0, st.unbiased, momentum), {c}), tol, tol)) << name;
    }
  }
}

TEST(BatchNorm, ChannelsLastInputGivesChannelsLastOutputWithTheSameValues) {
  Tensor x = random_input({2, 6, 3, 5}, test_seed());
  Tensor xl = x.contiguous(MemoryFormat::ChannelsLast);
  Tensor w = random_input({6}, test_seed() + 1), b = random_input({6}, test_seed() + 2), none;
  for (bool training : {true, false}) {
    Tensor rm = random_input({6}, 3), rv = positive({6}, 4), rm2 = rm.clone(), rv2 = rv.clone();
    Tensor y = batch_norm(x, w, b, rm, rv, {.training = training});
    Tensor yl = batch_norm(xl, w, b, rm2, rv2, {.training = training});
    EXPECT_TRUE(yl.is_contiguous(MemoryFormat::ChannelsLast)) << training;
    EXPECT_TRUE(all_close(yl, y, 1e-14, 1e-14)) << training;
    EXPECT_TRUE(all_close(rv2, rv, 1e-14, 1e-14));
  }
  // A strided channels_last view keeps its layout too.
  Tensor sliced = random_input({2, 4, 6, 6}, 9).permute({0, 3, 1, 2}).slice(1, 0, 6, 1).slice(2, 0, 4, 2);
  Tensor none_rm, none_rv;
  Tensor ys = batch_norm(sliced, none, none, none_rm, none_rv);
  EXPECT_TRUE(ys.is_contiguous(MemoryFormat::ChannelsLast));
  const ChannelStats st = loop_stats(sliced);
  EXPECT_TRUE(all_close(ys, loop_normalize(sliced, st.mean, st.var, none, none, 1e-5), 1e-12, 1e-12));
}

TEST(BatchNorm, EvalModeNormalizesWithTheRunningStatsAndLeavesThemAlone) {
  uint64_t seed = test_seed();
  for (const auto& [name, x] : layouts(seed, kFloat64)) {
    const int64_t c = x.size(1);
    Tensor w = random_input({c}, ++seed), b = random_input({c}, ++seed);
    Tensor rm = random_input({c}, ++seed), rv = positive({c}, ++seed);
    const Tensor rm0 = rm.clone(), rv0 = rv.clone();
    Tensor y = batch_norm(x, w, b, rm, rv, {.training = false, .eps = 1e-2});
    EXPECT_TRUE(all_close(y, loop_normalize(x, rm0.to_vector<double>(), rv0.to_vector<double>(), w, b, 1e-2),
                          1e-13, 1e-13))
        << name;
    EXPECT_TRUE(all_close(rm, rm0, 0, 0));
    EXPECT_TRUE(all_close(rv, rv0, 0, 0));
  }
}

TEST(BatchNorm, AffineOffAndUntrackedStatsNormalizeOnly) {
  Tensor x = random_input({4, 3, 2, 5}, test_seed()), none_w, none_b, rm, rv;
  Tensor y = batch_norm(x, none_w, none_b, rm, rv);
  const ChannelStats st = loop_stats(x);
  EXPECT_TRUE(all_close(y, loop_normalize(x, st.mean, st.var, none_w, none_b, 1e-5), 1e-12, 1e-12));
  EXPECT_FALSE(rm.defined());
}

TEST(BatchNorm, HalfAndBFloat16UseFloat32ParamsAndKeepTheirDtype) {
  for (DType dtype : {kFloat16, kBFloat16}) {
    const double tol = dtype == kFloat16 ? 5e-3 : 3e-2;
    for (const auto& [name, x] : layouts(test_seed(), dtype)) {
      const int64_t c = x.size(1);
      Tensor w = random_input({c}, 1, kFloat32), b = random_input({c}, 2, kFloat32);
      Tensor rm = random_input({c}, 3, kFloat32), rv = positive({c}, 4, kFloat32);
      const Tensor rm0 = rm.clone();
      Tensor y = batch_norm(x, w, b, rm, rv, {.momentum = 0.5});
      EXPECT_EQ(y.dtype(), dtype);
      // The reference sees the same rounded inputs, so only the output rounding differs.
      const ChannelStats st = loop_stats(x);
      EXPECT_TRUE(all_close(y, loop_normalize(x, st.mean, st.var, w, b, 1e-5), tol, tol))
          << dtype_name(dtype) << " " << name;
      EXPECT_TRUE(all_close(rm, tensor<double>(blend(rm0, st.mean, 0.5), {c}), 1e-5, 1e-6));
    }
  }
}

// ---- gradients -------------------------------------------------------------------------------

TEST(BatchNormGrad, TrainingPassesFiniteDifferenceCheckForInputWeightAndBias) {
  uint64_t seed = test_seed();
  for (const auto& [name, x0] : layouts(seed, kFloat64)) {
    if (x0.numel() > 1000) continue;
    const int64_t c = x0.size(1);
    Tensor x = x0.detach().requires_grad_(true);
    Tensor w = random_input({c}, ++seed, kFloat64, true), b = random_input({c}, ++seed, kFloat64, true);
    for (bool affine : {true, false}) {
      auto fn = [&](const TensorList& in) {
        Tensor rm = zeros({c}, {.dtype = kFloat64}), rv = ones({c}, {.dtype = kFloat64});
        return batch_norm(in[0], affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), rm, rv);
      };
      auto result = gradcheck(fn, {x, w, b}, {.seed = seed});
      EXPECT_TRUE(result) << name << " affine " << affine << ": " << result.message;
    }
  }
}

TEST(BatchNormGrad, EvalPassesFiniteDifferenceCheck) {
  uint64_t seed = test_seed();
  for (const auto& [name, x0] : layouts(seed, kFloat64)) {
    if (x0.numel() > 1000) continue;
    const int64_t c = x0.size(1);
    Tensor x = x0.detach().requires_grad_(true);
    Tensor w = random_input({c}, ++seed, kFloat64, true), b = random_input({c}, ++seed, kFloat64, true);
    Tensor rm = random_input({c}, ++seed), rv = positive({c}, ++seed);
    auto fn = [&](const TensorList& in) {
      return batch_norm(in[0], in[1], in[2], rm, rv, {.training = false});
    };
    auto result = gradcheck(fn, {x, w, b}, {.seed = seed});
    EXPECT_TRUE(result) << name << ": " << result.message;
  }
}

TEST(BatchNormGrad, GradientOfChannelsLastInputIsChannelsLastInTrainAndEval) {
  for (bool training : {true, false}) {
    Tensor x =
        random_input({2, 3, 4, 4}, test_seed()).contiguous(MemoryFormat::ChannelsLast).requires_grad_(true);
    Tensor w = random_input({3}, 1, kFloat64, true), b = random_input({3}, 2, kFloat64, true);
    Tensor rm = zeros({3}, {.dtype = kFloat64}), rv = ones({3}, {.dtype = kFloat64});
    // A contiguous incoming gradient: the input's layout wins.
    batch_norm(x, w, b, rm, rv, {.training = training}).backward(random_input({2, 3, 4, 4}, 3));
    EXPECT_TRUE(x.grad().is_contiguous(MemoryFormat::ChannelsLast)) << training;
    // In training, the gradient of the normalized values sums to zero over each channel.
    if (training) EXPECT_TRUE(all_close(sum(x.grad(), {0, 2, 3}), zeros({3}, {.dtype = kFloat64}), 0, 1e-12));
  }
}

// ---- fused variants --------------------------------------------------------------------------

TEST(BatchNormFused, ReluAndAddReluEqualTheComposedOpsAndUpdateRunningStats) {
  uint64_t seed = test_seed();
  for (const auto& [name, x] : layouts(seed, kFloat64)) {
    const int64_t c = x.size(1);
    Tensor w = random_input({c}, ++seed), b = random_input({c}, ++seed), z = random_input(x.sizes(), ++seed);
    for (bool training : {true, false}) {
      Tensor rm1 = random_input({c}, 5), rv1 = positive({c}, 6), rm2 = rm1.clone(), rv2 = rv1.clone();
      const BatchNormOptions o{.training = training};
      EXPECT_TRUE(
          all_close(batch_norm_relu(x, w, b, rm1, rv1, o), relu(batch_norm(x, w, b, rm2, rv2, o)), 0, 0))
          << name;
      EXPECT_TRUE(all_close(rv1, rv2, 0, 0));
      EXPECT_TRUE(all_close(batch_norm_add_relu(x, z, w, b, rm1, rv1, o),
                            relu(batch_norm(x, w, b, rm2, rv2, o) + z), 0, 0))
          << name;
      EXPECT_TRUE(all_close(rm1, rm2, 0, 0));
    }
  }
}

TEST(BatchNormFused, PassFiniteDifferenceCheckForInputResidualWeightAndBias) {
  uint64_t seed = test_seed();
  Tensor x = random_input({3, 4, 3, 2}, seed, kFloat64, true);
  Tensor z = random_input({3, 4, 3, 2}, seed + 1, kFloat64, true);
  Tensor w = random_input({4}, seed + 2, kFloat64, true), b = random_input({4}, seed + 3, kFloat64, true);
  for (bool training : {true, false}) {
    Tensor rm = random_input({4}, 7), rv = positive({4}, 8);
    auto relu_fn = [&](const TensorList& in) {
      return batch_norm_relu(in[0], in[1], in[2], rm, rv, {.training = training, .momentum = 0.0});
    };
    auto add_fn = [&](const TensorList& in) {
      return batch_norm_add_relu(in[0], in[1], in[2], in[3], rm, rv, {.training = training, .momentum = 0.0});
    };
    auto r1 = gradcheck(relu_fn, {x, w, b}, {.seed = seed});
    EXPECT_TRUE(r1) << "relu training " << training << ": " << r1.message;
    auto r2 = gradcheck(add_fn, {x, z, w, b}, {.seed = seed});
    EXPECT_TRUE(r2) << "add_relu training " << training << ": " << r2.message;
  }
}

// ---- layer norm ------------------------------------------------------------------------------

// Normalizes each row of `d` trailing elements, as float64.
Tensor loop_layer_norm(const Tensor& x, int64_t d, const Tensor& w, const Tensor& b, double eps) {
  const std::vector<double> v = x.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> wv =
      w.defined() ? w.to(kFloat64).contiguous().to_vector<double>() : std::vector<double>(d, 1.0);
  const std::vector<double> bv =
      b.defined() ? b.to(kFloat64).contiguous().to_vector<double>() : std::vector<double>(d, 0.0);
  std::vector<double> y(v.size());
  for (size_t r = 0; r < v.size() / d; ++r) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) m += v[r * d + j] / static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) var += (v[r * d + j] - m) * (v[r * d + j] - m) / static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = (v[r * d + j] - m) / std::sqrt(var + eps) * wv[j] + bv[j];
  }
  return tensor<double>(y, x.sizes());
}

struct LayerNormCase {
  const char* name;
  Tensor x;
  Shape normalized;
};

std::vector<LayerNormCase> layer_norm_cases(uint64_t seed, DType dtype) {
  return {
      {"last dim", random_input({4, 3, 10}, seed, dtype), {10}},
      {"last two dims", random_input({5, 3, 4}, seed + 1, dtype), {3, 4}},
      {"short rows of 7", random_input({6, 7}, seed + 2, dtype), {7}},
      {"transposed input", random_input({6, 5, 3}, seed + 3, dtype).transpose(0, 2), {6}},
      {"channels_last input",
       random_input({2, 3, 4, 5}, seed + 4, dtype).contiguous(MemoryFormat::ChannelsLast),
       {4, 5}},
  };
}

TEST(LayerNorm, MatchesLoopReferenceOverOneAndTwoTrailingDims) {
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 : dtype == kFloat16 ? 5e-3 : 3e-2;
    for (const auto& c : layer_norm_cases(seed += 10, dtype)) {
      const int64_t d = numel_of(c.normalized);
      Tensor w = random_input(c.normalized, ++seed, dtype), b = random_input(c.normalized, ++seed, dtype);
      Tensor y = layer_norm(c.x, c.normalized, w, b, {.eps = 1e-4});
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_TRUE(y.is_contiguous());
      EXPECT_TRUE(all_close(y, loop_layer_norm(c.x, d, w, b, 1e-4), tol, tol))
          << dtype_name(dtype) << " " << c.name;
      EXPECT_TRUE(all_close(layer_norm(c.x, c.normalized), loop_layer_norm(c.x, d, {}, {}, 1e-5), tol, tol))
          << "no affine " << c.name;
    }
  }
}

// The dtype option is layer_norm(x).to(dtype) in one op: the same values forward and backward.
TEST(LayerNorm, DtypeOptionEqualsTheNormThenTheCast) {
  uint64_t seed = test_seed();
  for (DType dtype : {kBFloat16, kFloat16}) {
    for (const bool rms : {false, true}) {
      const Tensor x0 = random_input({3, 5, 24}, ++seed, kFloat32) + 0.25;
      const Tensor w0 = random_input({24}, ++seed, kFloat32), b0 = random_input({24}, ++seed, kFloat32);
      const Tensor g = random_input({3, 5, 24}, ++seed, kFloat32).to(dtype);
      TensorList results[2];
      for (int fused = 0; fused < 2; ++fused) {
        const Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true),
                     b = b0.detach().requires_grad_(true);
        const std::optional<DType> out = fused ? std::optional<DType>(dtype) : std::nullopt;
        Tensor y = rms ? rms_norm(x, {24}, w, {.dtype = out}) : layer_norm(x, {24}, w, b, {.dtype = out});
        if (!fused) y = y.to(dtype);
        EXPECT_EQ(y.dtype(), dtype);
        y.backward(g);
        results[fused] = {y, x.grad(), w.grad(), rms ? Tensor() : b.grad()};
      }
      for (size_t k = 0; k < 4; ++k) {
        if (!results[0][k].defined()) continue;
        EXPECT_TRUE(all_close(results[1][k], results[0][k], 0, 0))
            << dtype_name(dtype) << (rms ? " rms_norm" : " layer_norm") << " output " << k;
      }
    }
  }
  EXPECT_NABLA_ERROR(layer_norm(random_input({2, 4}, seed, kFloat32), {4}, {}, {}, {.dtype = kInt64}),
                     "layer_norm", "the result's dtype must be floating");
}

// add_layer_norm is h = x + y, z = layer_norm(h): values and gradients of both outputs.
TEST(LayerNorm, AddLayerNormEqualsTheAddThenTheNorm) {
  uint64_t seed = test_seed();
  const Tensor x0 = random_input({4, 6, 16}, ++seed, kFloat64),
               y0 = random_input({4, 6, 16}, ++seed, kFloat64);
  const Tensor w0 = random_input({16}, ++seed, kFloat64), b0 = random_input({16}, ++seed, kFloat64);
  const Tensor gh = random_input({4, 6, 16}, ++seed, kFloat64),
               gz = random_input({4, 6, 16}, ++seed, kFloat64);
  TensorList results[2];
  for (int fused = 0; fused < 2; ++fused) {
    const Tensor x = x0.detach().requires_grad_(true), y = y0.detach().requires_grad_(true),
                 w = w0.detach().requires_grad_(true), b = b0.detach().requires_grad_(true);
    Tensor h, z;
    if (fused) {
      const AddNorm r = add_layer_norm(x, y, {16}, w, b, {.eps = 1e-4});
      h = r.sum, z = r.normalized;
    } else {
      h = x + y;
      z = layer_norm(h, {16}, w, b, {.eps = 1e-4});
    }
    ((h * gh).sum() + (z * gz).sum()).backward();
    results[fused] = {h, z, x.grad(), y.grad(), w.grad(), b.grad()};
  }
  for (size_t k = 0; k < 6; ++k) EXPECT_TRUE(all_close(results[1][k], results[0][k], 1e-12, 1e-12)) << k;
  EXPECT_NABLA_ERROR(add_layer_norm(x0, y0, {16}, {}, {}, {.eps = 0}), "add_layer_norm", "eps > 0");
  EXPECT_NABLA_ERROR(add_layer_norm(x0, Tensor(), {16}), "add_layer_norm");
}

TEST(LayerNormGrad, PassesFiniteDifferenceCheckForInputWeightAndBias) {
  uint64_t seed = test_seed();
  for (const auto& c : layer_norm_cases(seed, kFloat64)) {
    Tensor x = c.x.detach().requires_grad_(true);
    Tensor w = random_input(c.normalized, ++seed, kFloat64, true);
    Tensor b = random_input(c.normalized, ++seed, kFloat64, true);
    auto fn = [&](const TensorList& in) { return layer_norm(in[0], c.normalized, in[1], in[2]); };
    auto result = gradcheck(fn, {x, w, b}, {.seed = seed});
    EXPECT_TRUE(result) << c.name << ": " << result.message;
    auto plain =
        gradcheck([&](const TensorList& in) { return layer_norm(in[0], c.normalized); }, {x}, {.seed = seed});
    EXPECT_TRUE(plain) << c.name << " without affine: " << plain.message;
  }
}

// ---- RMS norm ----------------------------------------------------------------------------------

// x / sqrt(mean(x^2) + eps) * w over each row of `d` trailing elements, as float64.
Tensor loop_rms_norm(const Tensor& x, int64_t d, const Tensor& w, double eps) {
  const std::vector<double> v = x.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> wv =
      w.defined() ? w.to(kFloat64).contiguous().to_vector<double>() : std::vector<double>(d, 1.0);
  std::vector<double> y(v.size());
  for (size_t r = 0; r < v.size() / d; ++r) {
    double squares = 0;
    for (int64_t j = 0; j < d; ++j) squares += v[r * d + j] * v[r * d + j] / static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = v[r * d + j] / std::sqrt(squares + eps) * wv[j];
  }
  return tensor<double>(y, x.sizes());
}

TEST(RMSNorm, MatchesLoopReferenceInEveryDtypeAndLayout) {
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 : dtype == kFloat16 ? 5e-3 : 3e-2;
    for (const auto& c : layer_norm_cases(seed += 10, dtype)) {
      const int64_t d = numel_of(c.normalized);
      const Tensor w = random_input(c.normalized, ++seed, dtype);
      const Tensor y = rms_norm(c.x, c.normalized, w, {.eps = 1e-4});
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_TRUE(all_close(y, loop_rms_norm(c.x, d, w, 1e-4), tol, tol))
          << dtype_name(dtype) << " " << c.name;
    }
  }
  // The default eps is float32's machine epsilon, as torch.nn.functional.rms_norm's (16-bit inputs
  // too: PyTorch takes it from the type the math runs in).
  const Tensor x = random_input({3, 8}, seed + 1, kFloat32) * 1e-3;
  EXPECT_TRUE(all_close(rms_norm(x, {8}), loop_rms_norm(x, 8, {}, 0x1p-23), 1e-5, 1e-7));
}

TEST(RMSNormGrad, PassesFiniteDifferenceCheckForInputAndWeight) {
  uint64_t seed = test_seed();
  for (const auto& c : layer_norm_cases(seed, kFloat64)) {
    const Tensor x = c.x.detach().requires_grad_(true);
    const Tensor w = random_input(c.normalized, ++seed, kFloat64, true);
    auto fn = [&](const TensorList& in) { return rms_norm(in[0], c.normalized, in[1], {.eps = 1e-3}); };
    auto result = gradcheck(fn, {x, w}, {.seed = seed});
    EXPECT_TRUE(result) << c.name << ": " << result.message;
  }
  EXPECT_NABLA_ERROR(rms_norm(random_input({2, 3}, seed), {4}), "rms_norm", "must match the last dims");
  EXPECT_NABLA_ERROR(rms_norm(random_input({2, 3}, seed), {3}, {}, {.eps = -1.0}), "rms_norm", "eps > 0");
}

TEST(LayerNormGrad, DoubleBackwardIsRefusedClearly) {
  Tensor x = random_input({3, 4}, test_seed(), kFloat64, true);
  Tensor y = layer_norm(x, {4});
  Tensor g = random_input({3, 4}, 1, kFloat64, true);
  y.backward(g, false, /*create_graph=*/true);
  EXPECT_NABLA_ERROR(sum(x.grad()).backward(), "layer_norm_backward", "double backward");
}

// ---- errors ----------------------------------------------------------------------------------

TEST(BatchNorm, ErrorsNameTheOpAndWhatWasExpected) {
  Tensor x = random_input({4, 3, 2, 2}, test_seed()), none;
  Tensor w3 = ones({3}, {.dtype = kFloat64}), w4 = ones({4}, {.dtype = kFloat64});
  Tensor rm = zeros({3}, {.dtype = kFloat64}), rv = ones({3}, {.dtype = kFloat64});
  Tensor rm4 = zeros({4}, {.dtype = kFloat64}), rv4 = ones({4}, {.dtype = kFloat64});
  EXPECT_NABLA_ERROR(batch_norm(x, w4, w3, rm, rv), "batch_norm", "weight of shape [3]", "float64[4]");
  EXPECT_NABLA_ERROR(batch_norm(x, w3, w3, rm4, rv4), "batch_norm", "running_mean of shape [3]");
  EXPECT_NABLA_ERROR(batch_norm(x, w3, w3, rm, rv, {.eps = 0}), "batch_norm", "eps > 0");
  EXPECT_NABLA_ERROR(batch_norm(x, w3, w3, rm, rv, {.eps = -1e-5}), "batch_norm", "eps > 0");
  Tensor x5 = random_input({4, 5, 2, 2}, 1);
  EXPECT_NABLA_ERROR(batch_norm(x5, w3, w3, rm, rv), "batch_norm", "one value per channel",
                     "float64[4, 5, 2, 2]");
  Tensor single = random_input({1, 3, 1, 1}, 2);
  EXPECT_NABLA_ERROR(batch_norm(single, w3, w3, rm, rv), "batch_norm", "more than 1 value per channel");
  Tensor single2d = random_input({1, 3}, 3);
  EXPECT_NABLA_ERROR(batch_norm(single2d, none, none, rm, rv), "more than 1 value per channel");
  EXPECT_NO_THROW(batch_norm(single, w3, w3, rm, rv, {.training = false}));  // eval needs no batch stats
  EXPECT_NABLA_ERROR(batch_norm(x, w3, w3, none, none, {.training = false}), "batch_norm", "eval mode");
  EXPECT_NABLA_ERROR(batch_norm(x, w3, w3, rm, none), "running_mean and running_var");
  Tensor w32 = ones({3});
  EXPECT_NABLA_ERROR(batch_norm(x, w32, w3, rm, rv), "batch_norm", "weight of dtype float64");
  Tensor xh = x.to(kFloat16), rmh = rm.to(kFloat16), rvh = rv.to(kFloat16);
  EXPECT_NABLA_ERROR(batch_norm(xh, none, none, rmh, rvh), "running_mean of dtype float32");
  Tensor v = random_input({4}, 4);
  EXPECT_NABLA_ERROR(batch_norm(v, none, none, rm, rv), "batch_norm", "(N, C)");
  Tensor z = random_input({4, 3, 2, 1}, 5);
  EXPECT_NABLA_ERROR(batch_norm_add_relu(x, z, w3, w3, rm, rv), "batch_norm_add_relu", "residual");
  EXPECT_NABLA_ERROR(batch_norm_relu(x, w3, w3, rm, rv, {.eps = 0}), "batch_norm_relu", "eps > 0");
}

TEST(LayerNorm, ErrorsNameTheOpAndWhatWasExpected) {
  Tensor x = random_input({2, 3, 4}, test_seed());
  EXPECT_NABLA_ERROR(layer_norm(x, {3}), "layer_norm", "normalized_shape [3]", "float64[2, 3, 4]");
  EXPECT_NABLA_ERROR(layer_norm(x, {2, 3, 4, 5}), "layer_norm", "last dims");
  EXPECT_NABLA_ERROR(layer_norm(x, {}), "layer_norm", "at least one");
  EXPECT_NABLA_ERROR(layer_norm(x, {4}, ones({3}, {.dtype = kFloat64})), "layer_norm", "weight of shape [4]");
  EXPECT_NABLA_ERROR(layer_norm(x, {4}, ones({4})), "layer_norm", "weight", "float32[4]");
  EXPECT_NABLA_ERROR(layer_norm(x, {4}, {}, {}, {.eps = 0.0}), "layer_norm", "eps > 0");
}

}  // namespace
}  // namespace nabla
