// max_pool2d, avg_pool2d and adaptive_avg_pool2d on the CPU: values (and max indices) against
// plain loops for every option (stride, padding, dilation, ceil_mode, count_include_pad, odd and
// non-divisible sizes) and layout (contiguous, channels_last, strided, 3-d), float64 gradcheck of
// each, double backward, reduced precision, and the error messages. max_pool2d's autograd path
// saves uint8 window offsets (Note [Compact max-pool indices] in ops/detail/pool_window.h): its
// values and gradients, first and second order, against the loops, against
// max_pool2d_with_indices' int64 path and against values from PyTorch 1.13, with ties and NaN.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

int64_t output_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;  // the last window may not start in the right padding
  return out;
}

struct Pooled {
  Tensor values;   // float64, (N, C, OH, OW)
  Tensor indices;  // int64 (max pooling only)
};

// Every output element from its window, by the definition. `kind`: 0 max, 1 avg.
Pooled reference_pool(const Tensor& x, int kind, PoolPair k, PoolPair s, PoolPair p, PoolPair d,
                      bool ceil_mode, bool count_include_pad = true) {
  if (s.h == 0) s = k;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = output_size(h, k.h, s.h, p.h, d.h, ceil_mode),
                ow = output_size(w, k.w, s.w, p.w, d.w, ceil_mode);
  const std::vector<double> xv = x.to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> out;
  std::vector<int64_t> idx;
  for (int64_t plane = 0; plane < n * c; ++plane) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        double best = -std::numeric_limits<double>::infinity(), total = 0;
        int64_t best_at = -1, valid = 0, padded = 0;  // best_at: the first tap inside the input, then
                                                      // the first maximum; the first NaN beats all
        for (int64_t a = 0; a < k.h; ++a) {
          for (int64_t b = 0; b < k.w; ++b) {
            const int64_t ih = i * s.h - p.h + a * d.h, iw = j * s.w - p.w + b * d.w;
            if (ih < h + p.h && iw < w + p.w) ++padded;  // taps past the padded input are not counted
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double v = xv[(plane * h + ih) * w + iw];
            ++valid, total += v;
            if (best_at < 0 || v > best || (std::isnan(v) && !std::isnan(best)))
              best = v, best_at = ih * w + iw;
          }
        }
        out.push_back(kind == 0 ? best : total / static_cast<double>(count_include_pad ? padded : valid));
        idx.push_back(best_at);
      }
    }
  }
  return {tensor<double>(out, {n, c, oh, ow}), tensor<int64_t>(idx, {n, c, oh, ow})};
}

Tensor reference_adaptive(const Tensor& x, int64_t oh, int64_t ow) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const std::vector<double> xv = x.to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> out;
  for (int64_t plane = 0; plane < n * c; ++plane) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        const auto h0 = static_cast<int64_t>(std::floor(static_cast<double>(i * h) / oh));
        const auto h1 = static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * h) / oh));
        const auto w0 = static_cast<int64_t>(std::floor(static_cast<double>(j * w) / ow));
        const auto w1 = static_cast<int64_t>(std::ceil(static_cast<double>((j + 1) * w) / ow));
        double total = 0;
        for (int64_t a = h0; a < h1; ++a)
          for (int64_t b = w0; b < w1; ++b) total += xv[(plane * h + a) * w + b];
        out.push_back(total / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
    }
  }
  return tensor<double>(out, {n, c, oh, ow});
}

struct MaxCase {
  const char* name;
  Shape x;
  MaxPool2dOptions o;
};

std::vector<MaxCase> max_cases() {
  return {
      {"2x2", {2, 3, 6, 8}, {.kernel = 2}},
      {"3x3 stride 2 padding 1, odd sizes", {2, 3, 7, 5}, {.kernel = 3, .stride = 2, .padding = 1}},
      {"rectangular, dilation",
       {1, 2, 9, 8},
       {.kernel = {3, 2}, .stride = {2, 1}, .padding = 1, .dilation = {2, 3}}},
      {"ceil_mode", {2, 2, 7, 6}, {.kernel = 3, .stride = 2, .ceil_mode = true}},
      {"ceil_mode with padding (last window dropped)",
       {1, 3, 6, 5},
       {.kernel = 2, .stride = 2, .padding = 1, .ceil_mode = true}},
      {"kernel = input", {1, 2, 4, 3}, {.kernel = {4, 3}}},
  };
}

struct AvgCase {
  const char* name;
  Shape x;
  AvgPool2dOptions o;
};

std::vector<AvgCase> avg_cases() {
  return {
      {"2x2", {2, 3, 6, 8}, {.kernel = 2}},
      {"3x3 stride 2 padding 1", {2, 3, 7, 5}, {.kernel = 3, .stride = 2, .padding = 1}},
      {"padding excluded",
       {2, 3, 7, 5},
       {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false}},
      {"rectangular, stride 1", {1, 2, 5, 6}, {.kernel = {3, 2}, .stride = 1, .padding = {1, 0}}},
      {"ceil_mode, padding counted",
       {2, 2, 6, 7},
       {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}},
      {"ceil_mode, padding excluded",
       {2, 2, 6, 7},
       {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false}},
  };
}

// The layouts each case runs in: every one holds the same logical values.
std::vector<std::pair<const char*, Tensor>> layouts(const Tensor& x) {
  const Shape wide{x.size(0), x.size(1), x.size(2), 2 * x.size(3)};
  Tensor strided = zeros(wide, {.dtype = x.dtype()});
  strided.slice(3, 0, wide[3], 2).copy_(x);
  return {{"contiguous", x},
          {"channels_last", x.contiguous(MemoryFormat::ChannelsLast)},
          {"strided", strided.slice(3, 0, wide[3], 2)},
          {"transposed", x.transpose(2, 3).contiguous().transpose(2, 3)}};
}

TEST(MaxPool2d, ValuesAndIndicesMatchLoopsForEveryOptionAndLayout) {
  uint64_t seed = test_seed();
  for (const MaxCase& c : max_cases()) {
    const Tensor x = random_input(c.x, ++seed);
    const Pooled want =
        reference_pool(x, 0, c.o.kernel, c.o.stride, c.o.padding, c.o.dilation, c.o.ceil_mode);
    for (const auto& [layout, xl] : layouts(x)) {
      auto [y, indices] = max_pool2d_with_indices(xl, c.o);
      EXPECT_TRUE(all_close(y, want.values, 0, 0)) << c.name << " " << layout;
      EXPECT_TRUE(all_close(indices, want.indices, 0, 0)) << c.name << " " << layout;
      EXPECT_EQ(indices.dtype(), kInt64);
      EXPECT_TRUE(all_close(max_pool2d(xl, c.o), want.values, 0, 0)) << c.name << " " << layout;
    }
  }
}

TEST(AvgPool2d, MatchesLoopsForEveryOptionAndLayout) {
  uint64_t seed = test_seed();
  for (const AvgCase& c : avg_cases()) {
    const Tensor x = random_input(c.x, ++seed);
    const Tensor want =
        reference_pool(x, 1, c.o.kernel, c.o.stride, c.o.padding, 1, c.o.ceil_mode, c.o.count_include_pad)
            .values;
    for (const auto& [layout, xl] : layouts(x)) {
      EXPECT_TRUE(all_close(avg_pool2d(xl, c.o), want, 1e-14, 1e-14)) << c.name << " " << layout;
    }
  }
}

TEST(AdaptiveAvgPool2d, MatchesPyTorchWindowsForDivisibleAndNonDivisibleSizes) {
  uint64_t seed = test_seed();
  const std::vector<std::pair<Shape, PoolPair>> cases = {
      {{2, 3, 8, 6}, {4, 3}}, {{2, 3, 7, 5}, {3, 2}},
      {{1, 2, 5, 7}, {4, 4}}, {{1, 2, 3, 2}, {5, 4}},  // more outputs than inputs: windows overlap
      {{2, 4, 7, 7}, 1},                               // global average pooling
  };
  for (const auto& [shape, out] : cases) {
    const Tensor x = random_input(shape, ++seed);
    const Tensor want = reference_adaptive(x, out.h, out.w);
    for (const auto& [layout, xl] : layouts(x)) {
      EXPECT_TRUE(all_close(adaptive_avg_pool2d(xl, out), want, 1e-14, 1e-14))
          << shape_str(shape) << " -> " << out.h << "x" << out.w << " " << layout;
    }
  }
}

TEST(Pool2d, GradientsMatchFiniteDifferencesForEveryOption) {
  uint64_t seed = test_seed();
  auto check = [](const std::string& what, const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
    for (const auto& [layout, xl] : layouts(x)) {
      Tensor input = xl.detach().requires_grad_(true);
      GradcheckResult r = gradcheck([&](const TensorList& in) { return fn(in[0]); }, {input});
      EXPECT_TRUE(r.ok) << what << " " << layout << ": " << r.message;
    }
  };
  for (const MaxCase& c : max_cases()) {
    check(
        std::string("max_pool2d ") + c.name, [&](const Tensor& x) { return max_pool2d(x, c.o); },
        random_input({1, 2, c.x[2], c.x[3]}, ++seed));
  }
  for (const AvgCase& c : avg_cases()) {
    check(
        std::string("avg_pool2d ") + c.name, [&](const Tensor& x) { return avg_pool2d(x, c.o); },
        random_input({1, 2, c.x[2], c.x[3]}, ++seed));
  }
  for (PoolPair out : {PoolPair{3, 2}, PoolPair{4, 4}, PoolPair{1}}) {
    check(
        "adaptive_avg_pool2d", [&](const Tensor& x) { return adaptive_avg_pool2d(x, out); },
        random_input({1, 2, 7, 5}, ++seed));
  }
}

TEST(Pool2d, OverlappingMaxWindowsSumTheirGradients) {
  // 3x3 windows at stride 1 over 4x4: element (1, 1) lies in all four windows and is their max.
  std::vector<double> v = (random_input({1, 1, 4, 4}, test_seed()) * 0.1).to_vector<double>();
  v[5] = 10.0;
  Tensor x = tensor<double>(v, {1, 1, 4, 4}).requires_grad_(true);
  Tensor y = max_pool2d(x, {.kernel = 3, .stride = 1});  // (1, 1, 2, 2)
  y.backward(tensor<double>({1.0, 2.0, 3.0, 4.0}, {1, 1, 2, 2}));
  std::vector<double> want(16, 0.0);
  want[5] = 10.0;
  EXPECT_TRUE(all_close(x.grad(), tensor<double>(want, {1, 1, 4, 4}), 0, 0));
}

TEST(Pool2d, ChannelsLastStaysChannelsLastThroughBackward) {
  Tensor x =
      random_input({2, 3, 6, 6}, test_seed()).contiguous(MemoryFormat::ChannelsLast).requires_grad_(true);
  for (int op = 0; op < 3; ++op) {
    Tensor y = op == 0   ? max_pool2d(x, {.kernel = 2})
               : op == 1 ? avg_pool2d(x, {.kernel = 3, .padding = 1})
                         : adaptive_avg_pool2d(x, {4, 3});
    EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast)) << op;
    x.set_grad(Tensor());
    y.sum().backward();
    EXPECT_TRUE(x.grad().is_contiguous(MemoryFormat::ChannelsLast)) << op;
  }
}

TEST(Pool2d, UnbatchedInputDropsTheBatchDim) {
  const Tensor x = random_input({3, 7, 5}, test_seed());
  auto [y, indices] = max_pool2d_with_indices(x, {.kernel = 3, .stride = 2, .padding = 1});
  auto [y4, indices4] = max_pool2d_with_indices(x.unsqueeze(0), {.kernel = 3, .stride = 2, .padding = 1});
  EXPECT_TRUE(all_close(y, y4.squeeze(0), 0, 0));
  EXPECT_TRUE(all_close(indices, indices4.squeeze(0), 0, 0));
  EXPECT_EQ(avg_pool2d(x, {.kernel = 2}).sizes(), (Shape{3, 3, 2}));
  EXPECT_EQ(adaptive_avg_pool2d(x, {2, 2}).sizes(), (Shape{3, 2, 2}));
}

TEST(Pool2d, DoubleBackwardMatchesFiniteDifferences) {
  // The input gradient as a function of the output gradient (the backward's own derivative).
  uint64_t seed = test_seed();
  const Tensor x = random_input({1, 2, 7, 6}, ++seed);
  const std::vector<std::function<Tensor(const Tensor&)>> ops = {
      [](const Tensor& t) { return max_pool2d(t, {.kernel = 3, .stride = 2, .padding = 1}); },
      [](const Tensor& t) {
        return avg_pool2d(t, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true});
      },
      [](const Tensor& t) {
        return adaptive_avg_pool2d(t, {4, 4});
      },
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const Tensor go = random_input(ops[i](x).sizes(), ++seed, kFloat64, true);
    auto input_grad = [&](const TensorList& in) {
      EnableGradGuard enable;  // gradcheck evaluates finite differences without grad mode
      Tensor leaf = x.detach().clone().requires_grad_(true);
      autograd::backward({ops[i](leaf)}, {in[0]}, {.create_graph = true});
      return leaf.grad();
    };
    GradcheckResult r = gradcheck(input_grad, {go});
    EXPECT_TRUE(r.ok) << "op " << i << ": " << r.message;
  }
}

TEST(Pool2d, ReducedPrecisionComputesInFloat32AndKeepsItsDtype) {
  const Tensor x = random_input({2, 3, 7, 6}, test_seed());
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    const Tensor xl = x.to(dtype);
    const double tol = dtype == kFloat32 ? 1e-6 : dtype == kFloat16 ? 2e-3 : 1e-2;
    const Tensor y = avg_pool2d(xl, {.kernel = 3, .stride = 2, .padding = 1});
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_TRUE(
        all_close(y, avg_pool2d(xl.to(kFloat64), {.kernel = 3, .stride = 2, .padding = 1}), tol, tol));
    EXPECT_TRUE(all_close(max_pool2d(xl, {.kernel = 2}), max_pool2d(xl.to(kFloat64), {.kernel = 2}), 0, 0));
    EXPECT_TRUE(
        all_close(adaptive_avg_pool2d(xl, {3, 4}), adaptive_avg_pool2d(xl.to(kFloat64), {3, 4}), tol, tol));
  }
}

TEST(Pool2d, NaNIsTheMaximum) {
  std::vector<double> v(16, 1.0);
  v[6] = std::numeric_limits<double>::quiet_NaN();
  auto [y, indices] = max_pool2d_with_indices(tensor<double>(v, {1, 1, 4, 4}), {.kernel = 2});
  EXPECT_TRUE(std::isnan(y.to_vector<double>()[1]));
  EXPECT_EQ(indices.to_vector<int64_t>()[1], 6);
}

// The gradient of sum(y * gy) for max pooling with reference indices (N, C, OH, OW): each
// output's gy lands on its argmax; -1 (no tap inside the input) adds nothing.
Tensor reference_max_grad(const Tensor& indices, const Tensor& gy, const Shape& x) {
  const std::vector<int64_t> at = indices.contiguous().to_vector<int64_t>();
  const std::vector<double> g = gy.to(kFloat64).contiguous().to_vector<double>();
  const int64_t in_plane = x[2] * x[3], out_plane = indices.size(2) * indices.size(3);
  std::vector<double> grad(static_cast<size_t>(numel_of(x)), 0.0);
  for (size_t o = 0; o < at.size(); ++o) {
    if (at[o] >= 0) grad[static_cast<size_t>(static_cast<int64_t>(o) / out_plane * in_plane + at[o])] += g[o];
  }
  return tensor<double>(grad, x);
}

// v (N, C, H, W) at each reference index: the output gradient of sum(grad_input * v).
Tensor reference_pick(const Tensor& v, const Tensor& indices) {
  const std::vector<int64_t> at = indices.contiguous().to_vector<int64_t>();
  const std::vector<double> values = v.to(kFloat64).contiguous().to_vector<double>();
  const int64_t in_plane = v.size(2) * v.size(3), out_plane = indices.size(2) * indices.size(3);
  std::vector<double> picked(at.size());
  for (size_t o = 0; o < at.size(); ++o) {
    picked[o] = values[static_cast<size_t>(static_cast<int64_t>(o) / out_plane * in_plane + at[o])];
  }
  return tensor<double>(picked, indices.sizes());
}

// Values on a grid of halves in [-2, 2], so that windows hold ties; with `nan`, about one element
// in twelve is NaN (those that would round to 0), so that some windows hold two.
Tensor tied_input(const Shape& sizes, uint64_t seed, bool nan) {
  std::vector<double> v = random_input(sizes, seed).to_vector<double>();
  for (double& e : v) {
    e = nan && std::abs(e) < 0.25 ? std::numeric_limits<double>::quiet_NaN() : std::round(e * 2.0) / 2.0;
  }
  return tensor<double>(v, sizes);
}

// Geometries for the two index formats; the CPU's tiling path takes the disjoint ones in NCHW.
std::vector<MaxCase> index_format_cases() {
  return {
      {"3x3 stride 2 padding 1 (ResNet's stem)", {2, 3, 9, 8}, {.kernel = 3, .stride = 2, .padding = 1}},
      {"dilation 2 with padding", {1, 3, 11, 10}, {.kernel = 3, .stride = 2, .padding = 1, .dilation = 2}},
      {"rectangular, dilation, ceil_mode",
       {2, 2, 10, 9},
       {.kernel = {3, 2}, .stride = {2, 1}, .padding = 1, .dilation = {2, 3}, .ceil_mode = true}},
      {"overlapping windows at stride 1", {1, 3, 6, 7}, {.kernel = 3, .stride = 1}},
      {"disjoint 2x2, ceil_mode", {2, 3, 7, 9}, {.kernel = 2, .ceil_mode = true}},
      {"disjoint 3x3", {1, 2, 9, 10}, {.kernel = 3}},
      {"15x17 kernel: 255 taps, the most uint8 offsets take",
       {1, 2, 19, 20},
       {.kernel = {15, 17}, .stride = 2, .padding = {7, 8}}},
      {"16x16 kernel: 256 taps fall back to int64",
       {1, 2, 20, 18},
       {.kernel = 16, .stride = 2, .padding = 1}},
  };
}

// The layouts of `layouts` plus the 3-d input of a batch of one.
std::vector<std::pair<const char*, Tensor>> layouts_and_unbatched(const Tensor& x) {
  std::vector<std::pair<const char*, Tensor>> all = layouts(x);
  if (x.size(0) == 1) all.emplace_back("3-d", x.squeeze(0));
  return all;
}

TEST(MaxPool2d, CompactIndicesGiveTheValuesAndGradientsOfPlanePositions) {
  uint64_t seed = test_seed();
  for (const MaxCase& c : index_format_cases()) {
    for (DType dtype : {kFloat64, kFloat32}) {
      for (bool nan : {false, true}) {
        const Tensor x = tied_input(c.x, ++seed, nan);  // halves: exact in float32 too
        const Pooled want =
            reference_pool(x, 0, c.o.kernel, c.o.stride, c.o.padding, c.o.dilation, c.o.ceil_mode);
        const Tensor gy = random_input(want.values.sizes(), ++seed, dtype);
        const Tensor want_grad = reference_max_grad(want.indices, gy, c.x);
        const double tol = dtype == kFloat32 ? 1e-6 : 0;  // float32 gradients sum in double, then round
        for (const auto& [layout, xl] : layouts_and_unbatched(x.to(dtype))) {
          const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype)) +
                                   (nan ? " with NaN " : " ") + layout;
          const bool unbatched = xl.dim() == 3;
          auto batch = [&](const Tensor& t) { return unbatched ? t.unsqueeze(0) : t; };
          const Tensor g = unbatched ? gy.squeeze(0) : gy;
          Tensor compact_x = xl.detach().requires_grad_(true);
          Tensor compact_y = max_pool2d(compact_x, c.o);
          compact_y.backward(g);
          Tensor plane_x = xl.detach().requires_grad_(true);
          auto [plane_y, indices] = max_pool2d_with_indices(plane_x, c.o);
          plane_y.backward(g);
          EXPECT_EQ(indices.dtype(), kInt64) << what;
          EXPECT_TRUE(all_close(batch(indices), want.indices, 0, 0)) << what;
          EXPECT_TRUE(all_close(batch(compact_y), want.values, 0, 0)) << what;
          EXPECT_TRUE(all_close(batch(plane_y), want.values, 0, 0)) << what;
          EXPECT_TRUE(all_close(batch(compact_x.grad()), want_grad, tol, tol)) << what;
          EXPECT_TRUE(all_close(batch(plane_x.grad()), want_grad, tol, tol)) << what;
        }
      }
    }
  }
}

TEST(MaxPool2d, DoubleBackwardThroughCompactIndicesPicksAtTheArgmax) {
  // grad_input routes each output's gradient to its argmax, so the gradient of
  // sum(grad_input * v) with respect to the output gradient is v at each window's argmax.
  uint64_t seed = test_seed();
  for (const MaxCase& c : index_format_cases()) {
    const Tensor x = tied_input(c.x, ++seed, /*nan=*/true);
    const Pooled want =
        reference_pool(x, 0, c.o.kernel, c.o.stride, c.o.padding, c.o.dilation, c.o.ceil_mode);
    const Tensor v = random_input(c.x, ++seed);
    for (const auto& [layout, xl] : layouts(x)) {
      Tensor leaf = xl.detach().requires_grad_(true);
      Tensor go = random_input(want.values.sizes(), ++seed, kFloat64, /*requires_grad=*/true);
      autograd::backward({max_pool2d(leaf, c.o)}, {go}, {.create_graph = true});
      const Tensor first = leaf.grad().detach().clone();
      (leaf.grad() * v).sum().backward();
      EXPECT_TRUE(all_close(first, reference_max_grad(want.indices, go.detach(), c.x), 0, 0))
          << c.name << " " << layout;
      EXPECT_TRUE(all_close(go.grad(), reference_pick(v, want.indices), 0, 0)) << c.name << " " << layout;
    }
  }
}

TEST(MaxPool2d, MatchesPyTorchWithTiesNaNAndMinusInfinityInBothIndexFormats) {
  // From PyTorch 1.13: y, indices = torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1,
  // dilation=2, ceil_mode=True, return_indices=True); y.backward(gy) with gy[k] = 0.25 * (k + 1).
  // x cycles through nine levels (ties), with one NaN (in four windows) and one -inf.
  std::vector<double> v(2 * 7 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 5 + 3) % 9) * 0.5 - 2.0;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  v[35] = nan;                                       // plane 0, (5, 5)
  v[49] = -std::numeric_limits<double>::infinity();  // plane 1, (1, 1)
  const Tensor x = tensor<double>(v, {1, 2, 7, 6});
  const MaxPool2dOptions o{.kernel = 3, .stride = 2, .padding = 1, .dilation = 2, .ceil_mode = true};
  const Tensor want_y = tensor<double>(
      {2.0, 2.0, 0.0, 2.0, nan, nan, 2.0, nan, nan, 1.0, 1.5, 1.5, 2.0, 2.0, 1.5, 2.0, 2.0, 0.0},
      {1, 2, 3, 3});
  const Tensor want_indices =
      tensor<int64_t>({19, 19, 11, 19, 35, 35, 19, 35, 35, 9, 11, 11, 31, 31, 11, 31, 31, 23}, {1, 2, 3, 3});
  std::vector<double> grad(v.size(), 0.0);
  for (auto [at, value] : std::vector<std::pair<size_t, double>>{
           {11, 0.75}, {19, 3.5}, {35, 7.0}, {51, 2.5}, {53, 9.5}, {65, 4.5}, {73, 15.0}}) {
    grad[at] = value;
  }
  const Tensor want_grad = tensor<double>(grad, {1, 2, 7, 6});
  std::vector<double> gy(18);
  for (size_t k = 0; k < gy.size(); ++k) gy[k] = 0.25 * static_cast<double>(k + 1);
  const Tensor g = tensor<double>(gy, {1, 2, 3, 3});
  for (const auto& [layout, xl] : layouts_and_unbatched(x)) {
    const bool unbatched = xl.dim() == 3;
    auto batch = [&](const Tensor& t) { return unbatched ? t.unsqueeze(0) : t; };
    Tensor compact_x = xl.detach().requires_grad_(true);
    Tensor compact_y = max_pool2d(compact_x, o);
    compact_y.backward(unbatched ? g.squeeze(0) : g);
    Tensor plane_x = xl.detach().requires_grad_(true);
    auto [plane_y, indices] = max_pool2d_with_indices(plane_x, o);
    plane_y.backward(unbatched ? g.squeeze(0) : g);
    EXPECT_TRUE(all_close(batch(compact_y), want_y, 0, 0)) << layout;
    EXPECT_TRUE(all_close(batch(plane_y), want_y, 0, 0)) << layout;
    EXPECT_TRUE(all_close(batch(indices), want_indices, 0, 0)) << layout;
    EXPECT_TRUE(all_close(batch(compact_x.grad()), want_grad, 0, 0)) << layout;
    EXPECT_TRUE(all_close(batch(plane_x.grad()), want_grad, 0, 0)) << layout;
  }
}

TEST(MaxPool2d, WindowsWithNoTapInsideTheInputGiveMinusInfinityInBothIndexFormats) {
  // Rows -1 and 2 of a 2-row input: the dilation steps over both rows, so every window is empty.
  // PyTorch's checks allow it (PyTorch 1.13 then returns indices past the plane); here the index
  // is -1 and no gradient reaches the input.
  const Tensor x = random_input({1, 2, 2, 5}, test_seed());
  const MaxPool2dOptions o{.kernel = {2, 1}, .padding = {1, 0}, .dilation = {3, 1}};
  for (const auto& [layout, xl] : layouts(x)) {
    Tensor compact_x = xl.detach().requires_grad_(true);
    Tensor compact_y = max_pool2d(compact_x, o);
    Tensor plane_x = xl.detach().requires_grad_(true);
    auto [plane_y, indices] = max_pool2d_with_indices(plane_x, o);
    const Tensor minus_inf =
        full({1, 2, 1, 5}, -std::numeric_limits<double>::infinity(), {.dtype = kFloat64});
    EXPECT_TRUE(all_close(compact_y, minus_inf, 0, 0)) << layout;
    EXPECT_TRUE(all_close(plane_y, minus_inf, 0, 0)) << layout;
    EXPECT_TRUE(all_close(indices, full({1, 2, 1, 5}, -1.0, {.dtype = kInt64}), 0, 0)) << layout;
    const Tensor gy = random_input({1, 2, 1, 5}, test_seed() + 1);
    compact_y.backward(gy);
    plane_y.backward(gy);
    EXPECT_TRUE(all_close(compact_x.grad(), zeros(x.sizes(), {.dtype = kFloat64}), 0, 0)) << layout;
    EXPECT_TRUE(all_close(plane_x.grad(), zeros(x.sizes(), {.dtype = kFloat64}), 0, 0)) << layout;
  }
}

TEST(Pool2d, EmptyBatchGivesEmptyOutput) {
  Tensor x = zeros({0, 3, 6, 6}, {.dtype = kFloat64, .requires_grad = true});
  Tensor y = max_pool2d(x, {.kernel = 2});
  EXPECT_EQ(y.sizes(), (Shape{0, 3, 3, 3}));
  EXPECT_EQ(avg_pool2d(x, {.kernel = 2}).sizes(), (Shape{0, 3, 3, 3}));
  y.sum().backward();
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

TEST(Pool2d, BadArgumentsGiveClearErrors) {
  const Tensor x = random_input({1, 2, 4, 4}, test_seed());
  EXPECT_NABLA_ERROR(max_pool2d(x, {.kernel = 5}), "max_pool2d", "too small", "[1, 2, 4, 4]", "5x5");
  EXPECT_NABLA_ERROR(max_pool2d(x, {.kernel = 3, .dilation = 2}), "max_pool2d", "too small", "dilation 2x2");
  EXPECT_NABLA_ERROR(max_pool2d(x, {.kernel = 2, .padding = 2}), "max_pool2d", "padding 2x2", "at most half");
  EXPECT_NABLA_ERROR(avg_pool2d(x, {.kernel = 3, .padding = {0, 2}}), "avg_pool2d", "at most half");
  EXPECT_NABLA_ERROR(max_pool2d(x, {.kernel = 0}), "max_pool2d", "positive kernel");
  EXPECT_NABLA_ERROR(max_pool2d(x, {.kernel = 2, .stride = -1}), "max_pool2d", "positive stride");
  EXPECT_NABLA_ERROR(max_pool2d(x, {.kernel = 2, .dilation = 0}), "max_pool2d", "positive dilation");
  EXPECT_NABLA_ERROR(avg_pool2d(x.view({2, 16}), {.kernel = 2}), "avg_pool2d", "3-d", "[2, 16]");
  EXPECT_NABLA_ERROR(max_pool2d(x.to(kInt64), {.kernel = 2}), "max_pool2d", "floating-point", "int64");
  EXPECT_NABLA_ERROR(adaptive_avg_pool2d(x, {0, 2}), "adaptive_avg_pool2d", "positive output size");
  EXPECT_NABLA_ERROR(adaptive_avg_pool2d(zeros({1, 2, 0, 4}), {2, 2}), "adaptive_avg_pool2d", "non-empty");
}

}  // namespace
}  // namespace nabla
