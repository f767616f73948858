// Views: geometry against hand-computed strides, storage sharing, copies only where needed,
// and gradchecks through every view.
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

TEST(View, ViewsShareStorageAndHaveTheExpectedStrides) {
  Tensor x = arange(24, {.dtype = kFloat32}).view({2, 3, 4});
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  Tensor s = x.slice(2, 1, 4, 2);
  EXPECT_EQ(s.sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(s.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(s.to_vector<float>()[1], 3.0f);
  Tensor e = x.select(1, 2).unsqueeze(0).expand({5, 2, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 12, 1}));
  EXPECT_EQ(e.storage().get(), x.storage().get());
  // Writing through a view is visible in the base.
  Tensor n = x.narrow(0, 1, 1);
  n.fill_(-1.0);
  EXPECT_EQ(x.to_vector<float>()[12], -1.0f);
  EXPECT_EQ(x.to_vector<float>()[11], 11.0f);
}

TEST(View, ReshapeViewsWhenItCanAndCopiesWhenItMust) {
  Tensor x = random_input({4, 6}, test_seed(), kFloat32);
  Tensor r = x.reshape({2, 2, 6});
  EXPECT_EQ(r.storage().get(), x.storage().get());
  Tensor t = x.t();
  EXPECT_NABLA_ERROR(t.view({24}), "view", "not compatible with the strides", "reshape");
  Tensor flat = t.reshape({-1});
  EXPECT_NE(flat.storage().get(), x.storage().get());
  // Row-major order of the transposed tensor.
  auto xv = x.to_vector<float>(), fv = flat.to_vector<float>();
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(fv[i * 4 + j], xv[j * 6 + i]);
  }
  // A transpose of a transpose views again.
  EXPECT_EQ(t.t().view({24}).storage().get(), x.storage().get());
}

TEST(View, ChannelsLastIsAStrideOrderAndContiguousConverts) {
  Tensor x = random_input({2, 3, 4, 5}, test_seed(), kFloat32);
  Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(all_close(cl, x, 0, 0));
  EXPECT_TRUE(all_close(cl.contiguous(), x, 0, 0));
  EXPECT_EQ(cl.clone().strides(), cl.strides());  // clone preserves the layout
}

TEST(View, SqueezeUnsqueezeFlattenAndExpandShapes) {
  Tensor x = ones({1, 3, 1, 2});
  EXPECT_EQ(x.squeeze().sizes(), (Shape{3, 2}));
  EXPECT_EQ(x.squeeze(2).sizes(), (Shape{1, 3, 2}));
  EXPECT_EQ(x.squeeze(1).sizes(), (Shape{1, 3, 1, 2}));
  EXPECT_EQ(x.unsqueeze(-1).sizes(), (Shape{1, 3, 1, 2, 1}));
  EXPECT_EQ(x.flatten(1).sizes(), (Shape{1, 6}));
  EXPECT_EQ(x.expand({4, -1, 5, 2}).sizes(), (Shape{4, 3, 5, 2}));
  EXPECT_NABLA_ERROR(x.expand({1, 4, 1, 2}), "expand", "size 3", "not to 4");
  EXPECT_NABLA_ERROR(x.permute({0, 1, 1, 2}), "permute", "repeats");
  EXPECT_NABLA_ERROR(x.view({5, -1}), "view", "invalid for a tensor of 6 elements");
  EXPECT_NABLA_ERROR(x.transpose(0, 4), "transpose", "dim 4 is out of range");
}

TEST(View, AsStridedReadsTheStorageAndChecksBounds) {
  Tensor x = arange(10, {.dtype = kFloat64});
  Tensor w = x.as_strided({3, 3}, {2, 1}, 1);  // sliding windows, overlapping
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1, 2, 3, 3, 4, 5, 5, 6, 7}));
  EXPECT_NABLA_ERROR(x.as_strided({4, 4}, {3, 1}, 0), "as_strided", "past the storage's 10 elements");
}

TEST(View, EveryViewHasCorrectGradients) {
  uint64_t seed = test_seed();
  Tensor x = random_input({3, 4, 5}, seed, kFloat64, true);
  using Fn = std::function<Tensor(const TensorList&)>;
  std::vector<std::pair<const char*, Fn>> cases = {
      {"view",
       [](const TensorList& t) {
         return t[0].view({12, 5}) * 2.0;
       }},
      {"reshape_copy", [](const TensorList& t) { return t[0].transpose(0, 2).reshape({-1}); }},
      {"permute",
       [](const TensorList& t) {
         return t[0].permute({2, 0, 1});
       }},
      {"transpose", [](const TensorList& t) { return t[0].transpose(0, 1); }},
      {"slice_step", [](const TensorList& t) { return t[0].slice(2, 1, 5, 2); }},
      {"narrow", [](const TensorList& t) { return t[0].narrow(1, 1, 2); }},
      {"select", [](const TensorList& t) { return t[0].select(1, -1); }},
      {"expand",
       [](const TensorList& t) {
         return t[0].narrow(1, 0, 1).expand({2, 3, 4, 5});
       }},
      {"squeeze_unsqueeze", [](const TensorList& t) { return t[0].unsqueeze(1).squeeze(); }},
      {"flatten", [](const TensorList& t) { return t[0].flatten(0, 1); }},
      {"contiguous_cl",
       [](const TensorList& t) {
         return t[0].view({1, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
       }},
      {"as_strided_overlap",
       [](const TensorList& t) {
         return t[0].as_strided({4, 6}, {3, 2}, 1);
       }},
  };
  for (auto& [name, fn] : cases) {
    auto r = gradcheck(fn, {x}, {.atol = 1e-4});
    EXPECT_TRUE(r.ok) << name << ": " << r.message;
  }
}

TEST(View, DtypeConversionsReturnGradientsInTheInputDtype) {
  Tensor x = random_input({3, 2}, test_seed(), kFloat64, true);
  Tensor y = x.to(kFloat32) * 3.0;  // float32 from here on
  y.sum().backward();
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  EXPECT_TRUE(all_close(x.grad(), full({3, 2}, 3.0, {.dtype = kFloat64})));
}

TEST(View, CopyBroadcastsConvertsAndCarriesGradient) {
  uint64_t seed = test_seed();
  Tensor src = random_input({3}, seed, kFloat64, true);
  auto r = gradcheck(
      [](const TensorList& t) {
        Tensor dst = zeros({2, 3}, {.dtype = kFloat64});
        dst.copy_(t[0]);
        return dst * 2.0;
      },
      {src});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor h = zeros({2, 3}, {.dtype = kFloat16});
  h.copy_(src.detach());
  EXPECT_TRUE(all_close(h.to(kFloat64), src.detach().expand({2, 3}), 1e-3, 1e-3));
}

}  // namespace
}  // namespace nabla
