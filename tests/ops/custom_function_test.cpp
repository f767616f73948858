// autograd::Function: custom ops with hand-written backward, checked against finite differences
// and against the same computation composed from built-in ops.
#include <cmath>

#include "test_util.h"

namespace nabla {
namespace {

using autograd::Context;
using testing::all_close;
using testing::random_input;
using testing::test_seed;

// The example from API.md.
struct ScaledTanh : autograd::Function<ScaledTanh> {
  static Tensor forward(Context& ctx, const Tensor& x, double alpha) {
    auto y = tanh(x);
    ctx.save_for_backward({y});
    ctx.saved_data["alpha"] = alpha;
    return y * alpha;
  }
  static TensorList backward(Context& ctx, const TensorList& grads) {
    auto y = ctx.saved()[0];
    double alpha = ctx.saved_data["alpha"].to_double();
    return {grads[0] * alpha * (1.0 - y * y)};
  }
};

TEST(CustomFunction, ScaledTanhPassesGradcheckAndMatchesTheComposite) {
  Tensor x = random_input({3, 4}, test_seed(), kFloat64, true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return ScaledTanh::apply(in[0], 1.7); }, {x}));

  Tensor y = ScaledTanh::apply(x, 1.7);
  EXPECT_NE(y.grad_fn(), nullptr);
  Tensor w = random_input({3, 4}, test_seed() + 1);
  (y * w).sum().backward();
  Tensor xr = x.detach().clone().requires_grad_(true);
  (tanh(xr) * 1.7 * w).sum().backward();
  EXPECT_TRUE(all_close(y, tanh(x.detach()) * 1.7, 1e-12));
  EXPECT_TRUE(all_close(x.grad(), xr.grad(), 1e-10));
}

TEST(CustomFunction, ForwardRecordsNothingAndNoGradInputsGiveAPlainTensor) {
  Tensor x = random_input({5}, test_seed());
  Tensor y = ScaledTanh::apply(x, 2.0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_TRUE(all_close(y, tanh(x) * 2.0, 1e-12));
}

// Two outputs: (a * b, a + b).
struct ProductAndSum : autograd::Function<ProductAndSum> {
  static TensorList forward(Context& ctx, const Tensor& a, const Tensor& b) {
    ctx.save_for_backward({a, b});
    return {a * b, a + b};
  }
  static TensorList backward(Context& ctx, const TensorList& g) {
    const auto& s = ctx.saved();
    return {g[0] * s[1] + g[1], g[0] * s[0] + g[1]};
  }
};

TEST(CustomFunction, TwoOutputs) {
  Tensor a = random_input({4}, test_seed(), kFloat64, true);
  Tensor b = random_input({4}, test_seed() + 1, kFloat64, true);
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        auto out = ProductAndSum::apply(in[0], in[1]);
        return out[0] * 2.0 + out[1] * out[1];
      },
      {a, b}));
  // Only the first output used: the second's gradient is zeros.
  auto out = ProductAndSum::apply(a, b);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(all_close(out[1], a.detach() + b.detach(), 1e-12));
  out[0].sum().backward();
  EXPECT_TRUE(all_close(a.grad(), b.detach(), 1e-12));
  EXPECT_TRUE(all_close(b.grad(), a.detach(), 1e-12));
}

// Values doubled, plus argmax indices that carry no gradient.
struct DoubleWithArgmax : autograd::Function<DoubleWithArgmax> {
  static TensorList forward(Context& ctx, const Tensor& x) {
    Tensor idx = argmax(x, 1);
    ctx.mark_non_differentiable({idx});
    return {x * 2.0, idx};
  }
  static TensorList backward(Context&, const TensorList& g) {
    // The non-differentiable output's gradient slot holds zeros of its shape.
    EXPECT_TRUE(g[1].defined() && g[1].sizes() == Shape{g[0].size(0)});
    if (g[1].defined()) {
      EXPECT_EQ(g[1].to_vector<int64_t>(), std::vector<int64_t>(g[0].size(0), 0));
    }
    return {g[0] * 2.0};
  }
};

TEST(CustomFunction, NonDifferentiableOutputGetsNoGrad) {
  Tensor x = random_input({3, 5}, test_seed(), kFloat64, true);
  auto out = DoubleWithArgmax::apply(x);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_EQ(out[1].grad_fn(), nullptr);
  EXPECT_EQ(out[1].to_vector<int64_t>(), argmax(x.detach(), 1).to_vector<int64_t>());
  Tensor w = random_input({3, 5}, test_seed() + 1);
  (out[0] * w).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), w * 2.0, 1e-12));
}

// exp, in place, written straight through data_ptr() as a custom kernel would (no version bump
// of its own); it saves its output.
struct ExpInPlace : autograd::Function<ExpInPlace> {
  static Tensor forward(Context& ctx, const Tensor& x) {
    double* p = x.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = std::exp(p[i]);
    ctx.mark_dirty({x});
    ctx.save_for_backward({x});
    return x;
  }
  static TensorList backward(Context& ctx, const TensorList& g) { return {g[0] * ctx.saved()[0]}; }
};

TEST(CustomFunction, InPlaceMarkedDirtyGivesCorrectGradients) {
  Tensor a = random_input({6}, test_seed(), kFloat64, true);
  Tensor x = a * 3.0;  // a non-leaf, so it may be modified in place
  uint32_t version = x.version();
  Tensor y = ExpInPlace::apply(x);
  EXPECT_TRUE(y.is_same(x));
  EXPECT_EQ(x.version(), version + 1);
  EXPECT_NE(x.grad_fn(), nullptr);
  Tensor w = random_input({6}, test_seed() + 1);
  (y * w).sum().backward();
  Tensor ad = a.detach();
  EXPECT_TRUE(all_close(y.detach(), exp(ad * 3.0), 1e-12));
  EXPECT_TRUE(all_close(a.grad(), w * exp(ad * 3.0) * 3.0, 1e-10));
}

TEST(CustomFunction, InPlaceMisuseIsCaught) {
  Tensor a = random_input({4}, test_seed(), kFloat64, true);
  // Modifying the saved output again before backward: the version check refuses.
  Tensor y = ExpInPlace::apply(a * 1.0);
  y.mul_(2.0);
  EXPECT_NABLA_ERROR(y.sum().backward(), "ExpInPlace", "modified by an in-place operation");
  // A leaf that requires grad cannot be modified in place.
  Tensor leaf = random_input({4}, test_seed() + 1, kFloat64, true);
  EXPECT_NABLA_ERROR(ExpInPlace::apply(leaf), "ExpInPlace", "leaf tensor that requires grad");
}

struct TooManyGrads : autograd::Function<TooManyGrads> {
  static Tensor forward(Context&, const Tensor& x) { return x * 2.0; }
  static TensorList backward(Context&, const TensorList& g) { return {g[0] * 2.0, g[0]}; }
};

struct WrongShapeGrad : autograd::Function<WrongShapeGrad> {
  static Tensor forward(Context&, const Tensor& x) { return x.sum(); }
  static TensorList backward(Context&, const TensorList& g) { return {g[0]}; }
};

TEST(CustomFunction, WrongGradientsAreClearErrors) {
  Tensor x = random_input({3}, test_seed(), kFloat64, true);
  EXPECT_NABLA_ERROR(TooManyGrads::apply(x).sum().backward(), "TooManyGrads::backward returned 2 gradients",
                     "forward took 1 tensor inputs");
  EXPECT_NABLA_ERROR(WrongShapeGrad::apply(x).backward(),
                     "WrongShapeGrad::backward returned a gradient of shape []", "has shape [3]");
}

// needs_input_grad, non-tensor arguments between tensors, and every saved_data kind.
struct WeightedSum : autograd::Function<WeightedSum> {
  static Tensor forward(Context& ctx, const Tensor& a, int64_t k, const Tensor& b, const std::string& tag) {
    ctx.saved_data["k"] = k;
    ctx.saved_data["tag"] = tag;
    ctx.saved_data["shape"] = a.sizes();
    ctx.saved_data["flag"] = true;
    EXPECT_TRUE(ctx.needs_input_grad(0));
    EXPECT_FALSE(ctx.needs_input_grad(1));
    EXPECT_NABLA_ERROR(ctx.saved(), "backward only");
    return a * static_cast<double>(k) + b;
  }
  static TensorList backward(Context& ctx, const TensorList& g) {
    EXPECT_EQ(ctx.saved_data["tag"].to_string(), "w");
    EXPECT_EQ(ctx.saved_data["shape"].to_shape(), g[0].sizes());
    EXPECT_TRUE(ctx.saved_data["flag"].to_bool());
    EXPECT_NABLA_ERROR(ctx.saved_data["tag"].to_double(), "asked for a double", "holds string");
    Tensor ga = ctx.needs_input_grad(0) ? g[0] * ctx.saved_data["k"].to_double() : Tensor();
    Tensor gb = ctx.needs_input_grad(1) ? g[0] : Tensor();
    EXPECT_FALSE(gb.defined());
    return {ga, gb};
  }
};

TEST(CustomFunction, NeedsInputGradAndSavedData) {
  Tensor a = random_input({2, 3}, test_seed(), kFloat64, true);
  Tensor b = random_input({2, 3}, test_seed() + 1);
  Tensor y = WeightedSum::apply(a, int64_t{3}, b, std::string("w"));
  EXPECT_TRUE(all_close(y, a.detach() * 3.0 + b, 1e-12));
  y.sum().backward();
  EXPECT_TRUE(all_close(a.grad(), full({2, 3}, 3.0, {.dtype = kFloat64}), 1e-12));
}

}  // namespace
}  // namespace nabla
