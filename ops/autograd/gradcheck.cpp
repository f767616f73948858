// Finite-difference gradient check along random cotangent directions (see gradcheck.h).
#include "nabla/ops/autograd/gradcheck.h"

#include <cmath>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/engine.h"
#include "nabla/ops/copy.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/reduce.h"

namespace nabla {

namespace {
// The 0-d view of logical (row-major) element i of t.
Tensor element_at(const Tensor& t, int64_t i) {
  Tensor e = t;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t inner = numel_of(Shape(t.sizes().begin() + d + 1, t.sizes().end()));
    e = e.select(0, i / inner);
    i %= inner;
  }
  return e;
}

double dot_with(const Tensor& out, const Tensor& v) {
  return sum(mul(out.to(kFloat64), v)).item<double>();
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          GradcheckOptions options) {
  Generator gen(options.seed);
  TensorList leaves;
  for (const auto& in : inputs) {
    NABLA_CHECK(!in.defined() || !in.requires_grad() || in.dtype() == kFloat64,
                "gradcheck: inputs that require grad should be float64 for a meaningful check, got {}",
                describe(in));
    leaves.push_back(in);
  }
  for (int dir = 0; dir < options.num_directions; ++dir) {
    // Analytical v . J by backward.
    for (auto& leaf : leaves) {
      if (leaf.defined() && leaf.requires_grad()) leaf.set_grad(Tensor());
    }
    Tensor out = fn(leaves);
    NABLA_CHECK(out.defined() && out.requires_grad(),
                "gradcheck: the function's output does not require grad");
    Tensor v = randn(out.sizes(), {.dtype = kFloat64, .device = out.device()}, &gen);
    autograd::backward({out}, {v.to(out.dtype())});

    for (size_t k = 0; k < leaves.size(); ++k) {
      const Tensor& leaf = leaves[k];
      if (!leaf.defined() || !leaf.requires_grad()) continue;
      Tensor analytic = leaf.grad().defined() ? leaf.grad().to(kFloat64).contiguous() : zeros_like(leaf);
      std::vector<double> a = analytic.to_vector<double>();
      // Numerical: perturb each element of a copy that keeps the leaf's layout (so strided and
      // channels_last inputs stay strided in every evaluation).
      Tensor base = leaf.detach().clone(MemoryFormat::Preserve);
      for (int64_t i = 0; i < leaf.numel(); ++i) {
        Tensor element = element_at(base, i);
        double original = element.item<double>();
        TensorList args = leaves;
        args[k] = base;
        auto eval_at = [&](double value) {
          NoGradGuard no_grad;
          element.fill_(value);
          return dot_with(fn(args), v);
        };
        double numeric =
            (eval_at(original + options.eps) - eval_at(original - options.eps)) / (2 * options.eps);
        {
          NoGradGuard no_grad;
          element.fill_(original);
        }
        if (std::abs(a[i] - numeric) > options.atol + options.rtol * std::abs(numeric)) {
          return {false,
                  fmt::format("gradcheck: input {} element {}: analytical {} vs numerical {} (direction {})",
                              k, i, a[i], numeric, dir)};
        }
      }
    }
  }
  for (auto& leaf : leaves) {
    if (leaf.defined() && leaf.requires_grad()) leaf.set_grad(Tensor());
  }
  return {};
}

}  // namespace nabla
