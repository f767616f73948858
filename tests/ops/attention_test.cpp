// scaled_dot_product_attention's math path on the CPU (the reference the fused CUDA kernels are
// tested against in tests/ops/cuda/parity_attention_test.cpp): forwards against a float64 loop over
// every (batch, head, query), with causal, boolean, additive and broadcast masks and Tq != Tk;
// float64 gradcheck of q, k, v and an additive mask; dropout against the mask bernoulli draws;
// autocast; grouped-query attention; and the errors. Also tril, triu and masked_fill.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax(q k^T * scale + mask) v by loops, for (B, H, T, D) inputs. `mask` is undefined or an
// additive float64 tensor already expanded to (B, H, Tq, Tk); `keep` (if defined) multiplies the
// weights after the softmax, as dropout does.
Tensor loop_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& mask,
                      double scale, const Tensor& keep = {}) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3), Dv = v.size(3);
  const auto qv = q.to(kFloat64).contiguous().to_vector<double>();
  const auto kv = k.to(kFloat64).contiguous().to_vector<double>();
  const auto vv = v.to(kFloat64).contiguous().to_vector<double>();
  const auto mv = mask.defined() ? mask.to(kFloat64).contiguous().to_vector<double>() : std::vector<double>();
  const auto keepv =
      keep.defined() ? keep.to(kFloat64).contiguous().to_vector<double>() : std::vector<double>();
  std::vector<double> out(static_cast<size_t>(B * H * Tq * Dv));
  std::vector<double> w(static_cast<size_t>(Tk));
  for (int64_t bh = 0; bh < B * H; ++bh) {
    for (int64_t i = 0; i < Tq; ++i) {
      double top = -kInf;
      for (int64_t j = 0; j < Tk; ++j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qv[(bh * Tq + i) * D + d] * kv[(bh * Tk + j) * D + d];
        s *= scale;
        if (!mv.empty()) s += mv[(bh * Tq + i) * Tk + j];
        if (causal && j > i) s = -kInf;
        w[j] = s;
        top = std::max(top, s);
      }
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j) sum += (w[j] = std::exp(w[j] - top));
      for (int64_t e = 0; e < Dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          const double weight = w[j] / sum * (keepv.empty() ? 1.0 : keepv[(bh * Tq + i) * Tk + j]);
          acc += weight * vv[(bh * Tk + j) * Dv + e];
        }
        out[(bh * Tq + i) * Dv + e] = acc;
      }
    }
  }
  return tensor<double>(out, {B, H, Tq, Dv});
}

struct Inputs {
  Tensor q, k, v;
};
Inputs random_qkv(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, uint64_t seed,
                  bool requires_grad = false) {
  return {random_input({B, H, Tq, D}, seed, kFloat64, requires_grad),
          random_input({B, H, Tk, D}, seed + 1, kFloat64, requires_grad),
          random_input({B, H, Tk, Dv}, seed + 2, kFloat64, requires_grad)};
}

TEST(Attention, MatchesLoopsWithoutMask) {
  const auto [q, k, v] = random_qkv(2, 3, 5, 7, 4, 6, test_seed());
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v), loop_attention(q, k, v, false, {}, 0.5), 1e-12,
                        1e-12));
}

TEST(Attention, CausalIsTopLeftAlignedForEveryShape) {
  for (auto [tq, tk] : {std::pair<int64_t, int64_t>{6, 6}, {4, 9}, {9, 4}}) {
    const auto [q, k, v] = random_qkv(1, 2, tq, tk, 8, 8, test_seed() + static_cast<uint64_t>(tq));
    const Tensor y = scaled_dot_product_attention(q, k, v, {.causal = true, .scale = 0.3});
    EXPECT_TRUE(all_close(y, loop_attention(q, k, v, true, {}, 0.3), 1e-12, 1e-12)) << tq << "x" << tk;
  }
}

TEST(Attention, BooleanAndAdditiveMasksBroadcast) {
  const auto [q, k, v] = random_qkv(2, 2, 5, 6, 4, 4, test_seed());
  // A key-padding mask (B, 1, 1, Tk): batch 0 hides its last two keys, batch 1 its first.
  std::vector<uint8_t> pad = {1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1};
  const Tensor keep = tensor<uint8_t>(pad, {2, 1, 1, 6}).to(kBool);
  Tensor additive = where(keep, zeros({}, {.dtype = kFloat64}), full({}, -kInf, {.dtype = kFloat64}));
  const Tensor full_mask = additive.expand({2, 2, 5, 6});
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.mask = keep}),
                        loop_attention(q, k, v, false, full_mask, 0.5), 1e-12, 1e-12));
  // An additive (Tq, Tk) bias shared by every batch and head, with causal on top.
  const Tensor bias = random_input({5, 6}, test_seed() + 9);
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.causal = true, .mask = bias}),
                        loop_attention(q, k, v, true, bias.expand({2, 2, 5, 6}), 0.5), 1e-12, 1e-12));
}

TEST(Attention, EveryInputHasGradients) {
  const auto [q, k, v] = random_qkv(1, 2, 4, 5, 3, 2, test_seed(), /*requires_grad=*/true);
  const Tensor bias = random_input({4, 5}, test_seed() + 5, kFloat64, true);
  for (bool causal : {false, true}) {
    auto fn = [causal](const TensorList& in) {
      return scaled_dot_product_attention(in[0], in[1], in[2], {.causal = causal, .mask = in[3]});
    };
    EXPECT_TRUE(gradcheck(fn, {q, k, v, bias})) << "causal " << causal;
  }
}

TEST(Attention, GradientsThroughNonContiguousHeads) {
  // The layout a transformer hands over: (B, T, H, D) transposed to (B, H, T, D).
  const Tensor q = random_input({2, 4, 3, 4}, test_seed(), kFloat64, true);
  const Tensor k = random_input({2, 4, 3, 4}, test_seed() + 1, kFloat64, true);
  const Tensor v = random_input({2, 4, 3, 4}, test_seed() + 2, kFloat64, true);
  auto fn = [](const TensorList& in) {
    return scaled_dot_product_attention(in[0].transpose(1, 2), in[1].transpose(1, 2), in[2].transpose(1, 2),
                                        {.causal = true});
  };
  EXPECT_TRUE(gradcheck(fn, {q, k, v}));
}

TEST(Attention, DropoutDropsTheBernoulliDrawnWeights) {
  const auto [q, k, v] = random_qkv(1, 2, 4, 5, 3, 3, test_seed());
  const double p = 0.25;
  Generator gen(test_seed() + 7);
  const Tensor y = scaled_dot_product_attention(q, k, v, {.dropout = p, .generator = &gen});
  Generator same(test_seed() + 7);
  const Tensor keep = bernoulli({1, 2, 4, 5}, 1 - p, {.dtype = kFloat64}, &same) / (1 - p);
  EXPECT_TRUE(all_close(y, loop_attention(q, k, v, false, {}, 1 / std::sqrt(3.0), keep), 1e-12, 1e-12));
}

TEST(Attention, ThreeDimensionalInputsAndFloat32) {
  const auto [q, k, v] = random_qkv(1, 3, 4, 4, 8, 8, test_seed());
  const Tensor y = scaled_dot_product_attention(q.select(0, 0).to(kFloat32), k.select(0, 0).to(kFloat32),
                                                v.select(0, 0).to(kFloat32), {.causal = true});
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_TRUE(all_close(y.unsqueeze(0), loop_attention(q, k, v, true, {}, 1 / std::sqrt(8.0)), 1e-5, 1e-6));
}

TEST(Attention, AutocastRunsInTheLowerPrecision) {
  const auto [q, k, v] = random_qkv(1, 2, 4, 4, 8, 8, test_seed());
  Tensor y;
  {
    amp::Autocast autocast(Device::cpu(), kBFloat16);
    y = scaled_dot_product_attention(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32));
  }
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_TRUE(all_close(y, loop_attention(q, k, v, false, {}, 1 / std::sqrt(8.0)), 3e-2, 3e-2));
}

TEST(Attention, BadInputsNameWhatIsWrong) {
  const auto [q, k, v] = random_qkv(1, 2, 4, 5, 3, 3, test_seed());
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k.narrow(3, 0, 2), v), "scaled_dot_product_attention",
                     "(..., Tq, D)");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, v.to(kFloat32)), "one floating dtype");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, v, {.dropout = 1.0}), "dropout must be in [0, 1)");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, v, {.scale = -1.0}), "scale must be finite and > 0");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, v, {.mask = ones({3, 5}, {.dtype = kBool})}),
                     "cannot be broadcast");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, v, {.mask = ones({4, 5}, {.dtype = kInt64})}),
                     "bool (true = attend) or floating");
  // A forced fused backend names itself and why it cannot run; math always can.
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, v, {.backend = AttentionBackend::cudnn}),
                     "backend cudnn", "CUDA only");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, v, {.backend = AttentionBackend::flash}),
                     "backend flash", "CUDA only");
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.backend = AttentionBackend::math}),
                        scaled_dot_product_attention(q, k, v), 0, 0));
}

// ---- grouped-query attention ---------------------------------------------------------------------

// t (B, Hkv, T, D) with each head copied g times in place, element by element: head h of the
// result is head h / g of t (Hugging Face's repeat_kv).
Tensor loop_repeat_heads(const Tensor& t, int64_t g) {
  const int64_t B = t.size(0), H = t.size(1), T = t.size(2), D = t.size(3);
  const auto from = t.to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> to(static_cast<size_t>(B * H * g * T * D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H * g; ++h) {
      for (int64_t e = 0; e < T * D; ++e)
        to[((b * H * g + h) * T * D) + e] = from[((b * H + h / g) * T * D) + e];
    }
  }
  return tensor<double>(to, {B, H * g, T, D});
}

TEST(Attention, GroupedQueryHeadsShareKeysAndValues) {
  // 6 query heads over 1, 2, 3 and 6 key/value heads; causal or with an additive bias; Tq != Tk.
  for (int64_t kv_heads : {1, 2, 3, 6}) {
    const uint64_t seed = test_seed() + static_cast<uint64_t>(kv_heads);
    const Tensor q = random_input({2, 6, 5, 4}, seed, kFloat64);
    const Tensor k = random_input({2, kv_heads, 7, 4}, seed + 1, kFloat64);
    const Tensor v = random_input({2, kv_heads, 7, 3}, seed + 2, kFloat64);
    const Tensor rk = loop_repeat_heads(k, 6 / kv_heads), rv = loop_repeat_heads(v, 6 / kv_heads);
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.causal = true, .enable_gqa = true}),
                          loop_attention(q, rk, rv, true, {}, 0.5), 1e-12, 1e-12))
        << kv_heads << " kv heads";
    const Tensor bias = random_input({5, 7}, seed + 3, kFloat64);
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.mask = bias, .enable_gqa = true}),
                          loop_attention(q, rk, rv, false, bias.expand({2, 6, 5, 7}), 0.5), 1e-12, 1e-12))
        << kv_heads << " kv heads, bias";
  }
}

TEST(Attention, GroupedQueryGradientsSumOverEachGroup) {
  // k and v's gradients are the sums over the query heads each serves: float64 gradcheck, and
  // against the gradients through explicitly repeated heads.
  const Tensor q = random_input({1, 4, 3, 4}, test_seed(), kFloat64, true);
  const Tensor k = random_input({1, 2, 5, 4}, test_seed() + 1, kFloat64, true);
  const Tensor v = random_input({1, 2, 5, 3}, test_seed() + 2, kFloat64, true);
  auto fn = [](const TensorList& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], {.causal = true, .enable_gqa = true});
  };
  EXPECT_TRUE(gradcheck(fn, {q, k, v}));
  const Tensor dout = random_input({1, 4, 3, 3}, test_seed() + 3, kFloat64);
  fn({q, k, v}).backward(dout);
  const Tensor k2 = k.detach().requires_grad_(true), v2 = v.detach().requires_grad_(true);
  // Repeating by concatenation along the heads in the right order, another way than the op's.
  const Tensor rk = cat({k2.narrow(1, 0, 1), k2.narrow(1, 0, 1), k2.narrow(1, 1, 1), k2.narrow(1, 1, 1)}, 1);
  const Tensor rv = cat({v2.narrow(1, 0, 1), v2.narrow(1, 0, 1), v2.narrow(1, 1, 1), v2.narrow(1, 1, 1)}, 1);
  scaled_dot_product_attention(q.detach(), rk, rv, {.causal = true}).backward(dout);
  EXPECT_TRUE(all_close(k.grad(), k2.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(v.grad(), v2.grad(), 1e-12, 1e-12));
}

TEST(Attention, GroupedQueryErrorsNameTheHeads) {
  const Tensor q = random_input({1, 6, 4, 8}, test_seed());
  const Tensor k = random_input({1, 4, 4, 8}, test_seed() + 1);
  const Tensor k2 = random_input({1, 2, 4, 8}, test_seed() + 2);
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k2, k2),
                     "enable_gqa lets key and value have fewer heads");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k, k, {.enable_gqa = true}), "divides the query's 6",
                     "key 4 and value 4 heads");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q, k2, k, {.enable_gqa = true}), "key 2 and value 4");
  EXPECT_NABLA_ERROR(scaled_dot_product_attention(q.select(0, 0).select(0, 0), k.select(0, 0).select(0, 0),
                                                  k.select(0, 0).select(0, 0), {.enable_gqa = true}),
                     "enable_gqa needs (..., H, T, D)");
}

// ---- tril, triu, masked_fill ------------------------------------------------------------------

Tensor loop_triangle(const Tensor& x, int64_t diagonal, bool lower) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  auto v = x.to(kFloat64).contiguous().to_vector<double>();
  for (size_t at = 0; at < v.size(); ++at) {
    const int64_t i = static_cast<int64_t>(at) / cols % rows, j = static_cast<int64_t>(at) % cols;
    if (lower ? j - i > diagonal : j - i < diagonal) v[at] = 0;
  }
  return tensor<double>(v, x.sizes());
}

TEST(Masking, TrilAndTriuKeepTheirTriangleForEveryDiagonal) {
  const Tensor x = random_input({2, 4, 6}, test_seed());
  for (int64_t d : {-2, 0, 1, 5}) {
    EXPECT_TRUE(all_close(tril(x, {.diagonal = d}), loop_triangle(x, d, true), 0, 0)) << d;
    EXPECT_TRUE(all_close(triu(x, {.diagonal = d}), loop_triangle(x, d, false), 0, 0)) << d;
  }
  const Tensor b = tril(ones({3, 3}, {.dtype = kBool}));
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ(b.to(kInt64).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return triu(in[0], {.diagonal = 1}); },
                        {random_input({3, 4}, test_seed() + 1, kFloat64, true)}));
  EXPECT_NABLA_ERROR(tril(ones({3})), "tril", "at least 2 dims");
}

TEST(Masking, MaskedFillBroadcastsTheMask) {
  const Tensor x = random_input({2, 3}, test_seed(), kFloat64, true);
  const Tensor mask = tensor<uint8_t>({1, 0, 1}, {3}).to(kBool);
  const Tensor y = masked_fill(x, mask, -5.0);
  auto expect = x.detach().to_vector<double>();
  for (size_t at : {0, 2, 3, 5}) expect[at] = -5.0;
  EXPECT_TRUE(all_close(y, tensor<double>(expect, {2, 3}), 0, 0));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return masked_fill(in[0], mask, 2.0); }, {x}));
  EXPECT_NABLA_ERROR(masked_fill(x, ones({2, 3}), 0.0), "masked_fill", "must be bool");
  EXPECT_NABLA_ERROR(masked_fill(x, ones({4, 3}, {.dtype = kBool}), 0.0), "masked_fill");
  EXPECT_NABLA_ERROR(masked_fill(ones({3}, {.dtype = kInt64}), mask, -INFINITY), "masked_fill",
                     "does not fit", "finite whole number");
  EXPECT_EQ(masked_fill(ones({3}, {.dtype = kInt64}), mask, 7.0).to_vector<int64_t>(),
            (std::vector<int64_t>{7, 1, 7}));
}

}  // namespace
}  // namespace nabla
