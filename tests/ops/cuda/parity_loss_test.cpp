// CUDA losses and embedding against the CPU backend: cross_entropy (with label smoothing and
// ignore_index, (N, C) and channels_last (N, C, H, W) logits), nll_loss, mse_loss and
// binary_cross_entropy_with_logits (with pos_weight), every reduction, forward and backward, for
// every floating dtype; an out-of-range target gives NaN on CUDA instead of waiting for the
// device; embedding lookups and weight gradients with repeated indices and padding_idx.
#include <cmath>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

const std::vector<Reduction> kReductions = {Reduction::None, Reduction::Mean, Reduction::Sum};

Tensor random_targets(const Shape& sizes, int64_t classes, uint64_t seed, int64_t ignore) {
  Generator gen(seed);
  std::vector<int64_t> v = randint(0, classes, sizes, {.dtype = kInt64}, &gen).to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); i += 5) v[i] = ignore;
  return tensor<int64_t>(v, sizes);
}

// Losses chain several ops that each round a 16-bit result, and the two backends may round a
// value on opposite sides once (one ulp); reductions sum in different orders.
Tolerance loss_tolerance(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return {1e-5, 1e-6};
    case kFloat16:
      return {2e-3, 2e-3};
    case kBFloat16:
      return {2e-2, 2e-2};
    default:
      return tolerance_for(dtype);
  }
}

TEST(CudaParityLoss, CrossEntropyAndNllLossMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  struct Case {
    Shape logits;
    MemoryFormat format;
  };
  // (37, 64) and (6, 1000) take the 16-byte vector path of the fused cross-entropy in every
  // dtype (1000 classes: many vectors per thread to combine), (64, 10) the scalar one but in float64.
  const std::vector<Case> cases = {{{64, 10}, MemoryFormat::Contiguous},
                                   {{37, 64}, MemoryFormat::Contiguous},
                                   {{6, 1000}, MemoryFormat::Contiguous},
                                   {{2, 5, 6, 7}, MemoryFormat::Contiguous},
                                   {{2, 5, 6, 7}, MemoryFormat::ChannelsLast}};
  for (const Case& c : cases) {
    Shape tshape(c.logits);
    tshape.erase(tshape.begin() + 1);
    const Tensor t = random_targets(tshape, c.logits[1], ++seed, -100);
    for (DType dtype : kFloatDTypes) {
      const Tensor host = (random_values(c.logits, ++seed, dtype) * 2.0).contiguous(c.format);
      for (Reduction r : kReductions) {
        for (double eps : {0.0, 0.1}) {
          Tensor x = host.detach().requires_grad_(true), xd = to_cuda(host).requires_grad_(true);
          const CrossEntropyOptions o{.label_smoothing = eps, .reduction = r};
          Tensor loss = cross_entropy(x, t, o), loss_d = cross_entropy(xd, to_cuda(t), o);
          const std::string what = context("cross_entropy", dtype) + shape_str(c.logits) + " eps " +
                                   std::to_string(eps) + " reduction " + std::to_string(int(r));
          EXPECT_TRUE(matches_cpu(loss_d, loss, loss_tolerance(dtype))) << what;
          const Tensor g = r == Reduction::None ? random_values(loss.sizes(), ++seed, dtype) : Tensor();
          loss.backward(g);
          loss_d.backward(g.defined() ? to_cuda(g) : g);
          EXPECT_TRUE(matches_cpu(xd.grad(), x.grad(), loss_tolerance(dtype))) << what << " grad";
        }
        Tensor lp = log_softmax(host, 1).detach().requires_grad_(true),
               lpd = to_cuda(lp.detach()).requires_grad_(true);
        Tensor nll = nll_loss(lp, t, {.reduction = r}), nll_d = nll_loss(lpd, to_cuda(t), {.reduction = r});
        EXPECT_TRUE(matches_cpu(nll_d, nll, loss_tolerance(dtype))) << context("nll_loss", dtype);
        (r == Reduction::None ? nll.sum() : nll).backward();
        (r == Reduction::None ? nll_d.sum() : nll_d).backward();
        EXPECT_TRUE(matches_cpu(lpd.grad(), lp.grad(), loss_tolerance(dtype)))
            << context("nll_loss grad", dtype);
      }
    }
  }
}

TEST(CudaParityLoss, OutOfRangeTargetGivesNaNWithoutWaitingForTheDevice) {
  SKIP_WITHOUT_GPU();
  const Tensor x = to_cuda(random_values({3, 4}, test_seed(), kFloat32));
  const Tensor t = to_cuda(tensor<int64_t>({0, 7, 2}, {3}));
  const std::vector<float> per = cross_entropy(x, t, {.reduction = Reduction::None}).cpu().to_vector<float>();
  EXPECT_FALSE(std::isnan(per[0]));
  EXPECT_TRUE(std::isnan(per[1]));
  EXPECT_TRUE(std::isnan(cross_entropy(x, t).cpu().item<double>()));
}

TEST(CudaParityLoss, MseAndBinaryCrossEntropyWithLogitsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {
    const Tensor a = random_values({8, 6}, ++seed, dtype) * 3.0, b = random_values({8, 6}, ++seed, dtype);
    const Tensor prob = abs(random_values({8, 6}, ++seed, dtype)) * 0.5;  // targets in [0.05, 1]
    const Tensor pw = abs(random_values({6}, ++seed, dtype)) + 0.5;
    for (Reduction r : kReductions) {
      for (int which = 0; which < 3; ++which) {
        Tensor x = a.detach().requires_grad_(true), xd = to_cuda(a).requires_grad_(true);
        auto run = [&](const Tensor& in, const Tensor& other, const Tensor& w) {
          if (which == 0) return mse_loss(in, other, {.reduction = r});
          return binary_cross_entropy_with_logits(in, other,
                                                  {.pos_weight = which == 2 ? w : Tensor(), .reduction = r});
        };
        const Tensor other = which == 0 ? b : prob;
        Tensor loss = run(x, other, pw), loss_d = run(xd, to_cuda(other), to_cuda(pw));
        const std::string what = context(which == 0   ? "mse_loss"
                                         : which == 1 ? "bce"
                                                      : "bce pos_weight",
                                         dtype) +
                                 " reduction " + std::to_string(int(r));
        EXPECT_TRUE(matches_cpu(loss_d, loss, loss_tolerance(dtype))) << what;
        (r == Reduction::None ? loss.sum() : loss).backward();
        (r == Reduction::None ? loss_d.sum() : loss_d).backward();
        EXPECT_TRUE(matches_cpu(xd.grad(), x.grad(), loss_tolerance(dtype))) << what << " grad";
      }
    }
  }
}

TEST(CudaParityEmbedding, LookupsAndWeightGradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  Generator gen(seed);
  const Tensor idx = randint(0, 50, {16, 33}, {.dtype = kInt64}, &gen);  // many repeats
  for (DType dtype : kFloatDTypes) {
    for (int64_t padding_idx : {-1, 7}) {
      const Tensor host = random_values({50, 24}, ++seed, dtype);
      Tensor w = host.detach().requires_grad_(true), wd = to_cuda(host).requires_grad_(true);
      Tensor y = embedding(w, idx, {.padding_idx = padding_idx});
      Tensor yd = embedding(wd, to_cuda(idx), {.padding_idx = padding_idx});
      EXPECT_TRUE(matches_cpu(yd, y, Tolerance{0, 0})) << dtype_name(dtype);
      const Tensor g = random_values(y.sizes(), ++seed, dtype);
      y.backward(g);
      yd.backward(to_cuda(g));
      // Float32 sums in another order (atomics), rounded once to 16 bits.
      const Tolerance tol = loss_tolerance(dtype);
      EXPECT_TRUE(matches_cpu(wd.grad(), w.grad(), tol))
          << dtype_name(dtype) << " padding_idx " << padding_idx;
    }
  }
}

}  // namespace
}  // namespace nabla
