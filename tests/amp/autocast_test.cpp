// The autocast policy on the CPU with bfloat16, one test per op category, each against the same
// op run outside autocast on explicitly cast inputs (the reference), plus scoping, the cast
// cache, and float32 gradients on the leaves.
#include <gtest/gtest.h>

#include <thread>

#include "test_util.h"

namespace nabla::testing {
namespace {

const Device kCpu = Device::cpu();

// A float32 tensor of random non-zero values.
Tensor input32(const Shape& sizes, uint64_t seed, bool requires_grad = false) {
  return random_input(sizes, seed, kFloat32, requires_grad);
}

Tensor bf16(const Tensor& t) {
  return t.detach().to(kBFloat16);
}

// Exact equality: autocast must compute what the explicitly cast op computes.
void expect_same(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.dtype(), expected.dtype());
  EXPECT_TRUE(all_close(actual, expected, 0.0, 0.0));
}

TEST(AmpAutocast, LowerPrecisionOpsRunInBFloat16) {
  const uint64_t s = test_seed();
  const Tensor x = input32({2, 3, 6, 6}, s), w = input32({4, 3, 3, 3}, s + 1), b = input32({4}, s + 2);
  const Tensor a = input32({5, 7}, s + 3), m = input32({7, 4}, s + 4);
  const Tensor ba = input32({3, 5, 7}, s + 5), bb = input32({3, 7, 2}, s + 6);
  const Tensor lw = input32({4, 7}, s + 7), lb = input32({4}, s + 8);
  Tensor conv, mat, mmr, bmr, lin;
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    conv = conv2d(x, w, b, {.padding = 1});
    mat = matmul(a, m);
    mmr = mm(a, m);
    bmr = bmm(ba, bb);
    lin = linear(a, lw, lb);
  }
  expect_same(conv, conv2d(bf16(x), bf16(w), bf16(b), {.padding = 1}));
  expect_same(mat, matmul(bf16(a), bf16(m)));
  expect_same(mmr, mm(bf16(a), bf16(m)));
  expect_same(bmr, bmm(bf16(ba), bf16(bb)));
  expect_same(lin, linear(bf16(a), bf16(lw), bf16(lb)));
}

TEST(AmpAutocast, Float32OpsUpcastBFloat16Inputs) {
  const uint64_t s = test_seed();
  const Tensor x16 = bf16(input32({4, 6}, s));
  const Tensor pos16 = bf16(abs(input32({4, 6}, s + 1)));
  const Tensor y16 = bf16(input32({4, 6}, s + 2));
  const Tensor labels = randint(0, 6, {4});
  const Tensor g16 = bf16(input32({6}, s + 3)), beta16 = bf16(input32({6}, s + 4));
  const Tensor x = x16.to(kFloat32), pos = pos16.to(kFloat32), y = y16.to(kFloat32);
  std::vector<std::pair<Tensor, Tensor>> cases;  // (under autocast, reference)
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    cases = {{softmax(x16, 1), softmax(x, 1)},
             {log_softmax(x16, 1), log_softmax(x, 1)},
             {cross_entropy(x16, labels), cross_entropy(x, labels)},
             {nll_loss(x16, labels), nll_loss(x, labels)},
             {mse_loss(x16, y16), mse_loss(x, y)},
             {binary_cross_entropy_with_logits(x16, sigmoid(y16)), Tensor()},
             {exp(x16), exp(x)},
             {log(pos16), log(pos)},
             {pow(pos16, 1.5), pow(pos, 1.5)},
             {pow(pos16, y16), pow(pos, y)},
             {sum(x16), sum(x)},
             {sum(x16, {1}), sum(x, {1})},
             {mean(x16), mean(x)},
             {mean(x16, {0}), mean(x, {0})},
             {layer_norm(x16, {6}, g16, beta16), layer_norm(x, {6}, g16.to(kFloat32), beta16.to(kFloat32))}};
  }
  // The reference for BCE needs sigmoid outside autocast (sigmoid has no category: bf16 in, bf16 out).
  cases[5].second = binary_cross_entropy_with_logits(x, sigmoid(y16).to(kFloat32));
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_EQ(cases[i].first.dtype(), kFloat32);
    expect_same(cases[i].first, cases[i].second);
  }
}

TEST(AmpAutocast, BinaryOpsPromoteToTheWidestInput) {
  const uint64_t s = test_seed();
  const Tensor a16 = bf16(input32({3, 4}, s)), b32 = input32({3, 4}, s + 1);
  amp::Autocast autocast(kCpu, kBFloat16);
  const Tensor mixed = a16 * b32;
  EXPECT_EQ(mixed.dtype(), kFloat32);
  EXPECT_TRUE(all_close(mixed, a16.to(kFloat32) * b32, 0.0, 0.0));
  EXPECT_EQ((a16 + a16).dtype(), kBFloat16);
  EXPECT_EQ(add(a16, b32.to(kFloat64)).dtype(), kFloat64);
  // Ops without a category keep their input's dtype.
  EXPECT_EQ(relu(a16).dtype(), kBFloat16);
  EXPECT_EQ(relu(b32).dtype(), kFloat32);
}

TEST(AmpAutocast, BatchNormKeepsBFloat16ActivationsWithFloat32Statistics) {
  const uint64_t s = test_seed();
  const Tensor x16 = bf16(input32({4, 3, 5, 5}, s)).contiguous(MemoryFormat::ChannelsLast);
  const Tensor w = input32({3}, s + 1), b = input32({3}, s + 2);
  Tensor rm = zeros({3}), rv = ones({3}), rm_ref = zeros({3}), rv_ref = ones({3});
  Tensor y;
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    y = batch_norm(x16, w, b, rm, rv, {.training = true});
  }
  const Tensor y_ref = batch_norm(x16, w, b, rm_ref, rv_ref, {.training = true});
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
  expect_same(y, y_ref);
  EXPECT_EQ(rm.dtype(), kFloat32);
  EXPECT_TRUE(all_close(rm, rm_ref, 0.0, 0.0));
  // Independent check of the statistics: the batch mean per channel, in float64.
  const Tensor batch_mean = mean(x16.to(kFloat64), {0, 2, 3});
  EXPECT_TRUE(all_close(rm, batch_mean * 0.1, 1e-5, 1e-6));
}

TEST(AmpAutocast, BatchNorm2dModuleTakesBFloat16InputInTrainAndEval) {
  const uint64_t s = test_seed();
  nn::BatchNorm2d bn(3);
  const Tensor x = input32({4, 3, 5, 5}, s).contiguous(MemoryFormat::ChannelsLast);
  const Tensor x16 = bf16(x);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    bn.train(training);
    Tensor y;
    {
      amp::Autocast autocast(Device::cpu(), kBFloat16);
      y = bn(x16);
    }
    EXPECT_EQ(y.dtype(), kBFloat16);
    EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
    // Reference: the normalization written out in float64 from the (float32) stats used.
    const Tensor xd = x16.to(kFloat64);
    const Shape c{1, 3, 1, 1};
    Tensor mu, var;
    if (training) {
      mu = mean(xd, {0, 2, 3}, true);
      var = mean((xd - mu) * (xd - mu), {0, 2, 3}, true);
    } else {
      mu = bn.running_mean.to(kFloat64).view(c);
      var = bn.running_var.to(kFloat64).view(c);
    }
    const Tensor expected = (xd - mu) / sqrt(var + 1e-5) * bn.weight.detach().to(kFloat64).view(c) +
                            bn.bias.detach().to(kFloat64).view(c);
    EXPECT_TRUE(all_close(y, expected, 1e-2, 1e-2));  // bfloat16 output: 8 significant bits
  }
}

TEST(AmpAutocast, LeavesFloat64AndOtherDevicesAlone) {
  const uint64_t s = test_seed();
  const Tensor a64 = random_input({3, 4}, s), b64 = random_input({4, 2}, s + 1);
  const Tensor a = a64.to(kFloat32), b = b64.to(kFloat32);
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    EXPECT_EQ(matmul(a64, b64).dtype(), kFloat64);  // explicit float64 is never lowered
    EXPECT_EQ(softmax(a64, 1).dtype(), kFloat64);
  }
  {
    amp::Autocast autocast(Device::cuda(), kFloat16);  // for CUDA ops only
    EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
  }
}

TEST(AmpAutocast, ScopesNestRestoreAndCanBeDisabledInside) {
  const uint64_t s = test_seed();
  const Tensor a = input32({3, 4}, s), b = input32({4, 2}, s + 1);
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
  {
    amp::Autocast outer(kCpu, kBFloat16);
    EXPECT_TRUE(amp::is_autocast_enabled(kCpu));
    EXPECT_FALSE(amp::is_autocast_enabled(Device::cuda()));
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
    {
      amp::Autocast off(kCpu, kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(amp::is_autocast_enabled(kCpu));
      EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
      {
        amp::Autocast again(kCpu, kBFloat16);
        EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
      }
      EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
    }
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
  }
  EXPECT_FALSE(amp::is_autocast_enabled(kCpu));
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
}

TEST(AmpAutocast, StateIsPerThread) {
  const Tensor a = input32({3, 4}, test_seed()), b = input32({4, 2}, test_seed() + 1);
  amp::Autocast autocast(kCpu, kBFloat16);
  DType other_thread = kFloat64;
  std::thread worker([&] { other_thread = matmul(a, b).dtype(); });
  worker.join();
  EXPECT_EQ(other_thread, kFloat32);  // the scope belongs to this thread only
  EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
}

TEST(AmpAutocast, RejectsUnsupportedDtypes) {
  EXPECT_NABLA_ERROR(amp::Autocast(kCpu, kFloat16), "on the CPU autocast runs in bfloat16 only", "float16");
  EXPECT_NABLA_ERROR(amp::Autocast(Device::cuda(), kFloat32), "must be float16 or bfloat16", "float32");
  EXPECT_FALSE(amp::is_autocast_enabled(kCpu));  // a failed guard leaves no state behind
  EXPECT_EQ(autocast::scope_depth(), 0);
}

TEST(AmpAutocast, CastsEachParameterOncePerScope) {
  const uint64_t s = test_seed();
  Tensor w = input32({4, 5}, s, /*requires_grad=*/true);
  const Tensor b = input32({4}, s + 1, true);
  const Tensor x = input32({3, 5}, s + 2);
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    const Tensor y1 = linear(x, w, b);
    const Tensor y2 = linear(x * 2.0, w, b);
    const Tensor y3 = linear(x, w, b);
    EXPECT_EQ(autocast::cast_cache_size(), 2);  // w and b, once each; x is no parameter
    // The three products share one cast node per weight.
    EXPECT_TRUE(y1.grad_fn()->next_edges[1].node == y3.grad_fn()->next_edges[1].node);
    EXPECT_TRUE(y1.grad_fn()->next_edges[1].node == y2.grad_fn()->next_edges[1].node);
    {
      amp::Autocast inner(kCpu, kBFloat16);  // a nested scope shares the outer cache
      linear(x, w, b);
      EXPECT_EQ(autocast::cast_cache_size(), 2);
    }
    EXPECT_EQ(autocast::cast_cache_size(), 2);
    // An in-place update of the weight inside the scope makes a fresh cast with the new values.
    {
      NoGradGuard no_grad;
      w.mul_(3.0);
    }
    const Tensor y4 = linear(x, w, b);
    EXPECT_TRUE(all_close(y4, linear(bf16(x), bf16(w), bf16(b)), 0.0, 0.0));
  }
  EXPECT_EQ(autocast::cast_cache_size(), 0);  // the outermost scope cleared it
}

// Note [Activation casts]: a float32 activation that feeds several linears is cast once while the
// source is alive, not once per linear; an in-place change of the source makes a new one. The gradient still
// reaches the activation in float32, as the sum of the linears' input gradients (taken in bf16 and summed in
// the cast's bf16 gradient).
TEST(AmpAutocast, CastsAnActivationOnceWhileItsCastIsHeld) {
  const uint64_t s = test_seed();
  const Tensor x = input32({3, 5}, s, true);
  const Tensor wq = input32({4, 5}, s + 1, true), wk = input32({4, 5}, s + 2, true);
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    const Tensor h = x * 2.0;  // an activation (no leaf)
    const Tensor q = linear(h, wq), k = linear(h, wk);
    // Both products read the one cast: their input edges reach the same node.
    EXPECT_TRUE(q.grad_fn()->next_edges[0].node == k.grad_fn()->next_edges[0].node);
    (q.sum() + k.sum()).backward();
    // The reference: one explicit bf16 copy of h, outside autocast, used by both.
    const Tensor x2 = x.detach().requires_grad_(true);
    Tensor ref;
    {
      amp::Autocast off(kCpu, kBFloat16, /*enabled=*/false);
      const Tensor h16 = (x2 * 2.0).to(kBFloat16);
      ref = linear(h16, bf16(wq)).sum() + linear(h16, bf16(wk)).sum();
    }
    ref.backward();
    EXPECT_EQ(x.grad().dtype(), kFloat32);
    EXPECT_TRUE(all_close(x.grad(), x2.grad(), 0.0, 0.0));
  }
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    Tensor h = x * 2.0;
    const Tensor y1 = linear(h, wq);  // holds the cast for its backward
    h.mul_(3.0);                      // an in-place change: the next cast must see the new values
    const Tensor y2 = linear(h, wq);
    EXPECT_FALSE(y1.grad_fn()->next_edges[0].node == y2.grad_fn()->next_edges[0].node);
    amp::Autocast off(kCpu, kBFloat16, /*enabled=*/false);
    EXPECT_TRUE(all_close(y2, linear(bf16(h.detach()), bf16(wq)), 0.0, 0.0));
  }
}

TEST(AmpAutocast, GradientsReachFloat32LeavesInFloat32) {
  const uint64_t s = test_seed();
  const Tensor x = input32({2, 3, 6, 6}, s);
  const Tensor w = input32({4, 3, 3, 3}, s + 1, true), cb = input32({4}, s + 2, true);
  const Tensor lw = input32({5, 4 * 36}, s + 3, true);
  const Tensor labels = randint(0, 5, {2});
  {
    amp::Autocast autocast(kCpu, kBFloat16);
    const Tensor h = relu(conv2d(x, w, cb, {.padding = 1}));  // bf16
    const Tensor logits = linear(h.flatten(1), lw);           // bf16, used twice below
    const Tensor loss = cross_entropy(logits, labels) + mean(logits);
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();  // inside the scope: backward runs with autocast off
  }
  // The reference: the same graph with explicit bfloat16 leaves, outside autocast.
  const Tensor w16 = bf16(w).requires_grad_(true), cb16 = bf16(cb).requires_grad_(true);
  const Tensor lw16 = bf16(lw).requires_grad_(true);
  const Tensor h = relu(conv2d(bf16(x), w16, cb16, {.padding = 1}));
  const Tensor logits = linear(h.flatten(1), lw16);
  const Tensor loss = cross_entropy(logits.to(kFloat32), labels) + mean(logits.to(kFloat32));
  loss.backward();
  for (const auto& [leaf, ref] : {std::pair{w, w16}, {cb, cb16}, {lw, lw16}}) {
    ASSERT_TRUE(leaf.grad().defined());
    EXPECT_EQ(leaf.grad().dtype(), kFloat32);
    EXPECT_TRUE(all_close(leaf.grad(), ref.grad().to(kFloat32), 0.0, 0.0));
  }
}

}  // namespace
}  // namespace nabla::testing
