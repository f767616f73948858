// multinomial through the Gumbel-max trick: for u uniform in (0, 1), argmax_c (log p_c - log(-log u_c))
// is a draw from p, and the top k of the same keys is a draw of k without replacement. Everything
// is an existing op on either backend, so no kernel and no host synchronization is needed.
#include "nabla/ops/sampling.h"

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/sort.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

// CPU only (on CUDA it would wait for the device): every row non-negative, finite and not all zero.
void check_rows(const Tensor& p) {
  const auto v = p.to(kFloat64).contiguous().to_vector<double>();
  const int64_t C = p.size(-1);
  for (size_t r = 0; r * C < v.size(); ++r) {
    double total = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double x = v[r * C + c];
      NABLA_CHECK(std::isfinite(x) && x >= 0,
                  "multinomial: row {} has the probability {} at {}; expected finite "
                  "values >= 0",
                  r, x, c);
      total += x;
    }
    NABLA_CHECK(total > 0, "multinomial: row {} has no probability mass (every entry is 0)", r);
  }
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, MultinomialOptions options) {
  ops::check_defined("multinomial", probs, "probs");
  NABLA_CHECK(probs.is_floating_point() && (probs.dim() == 1 || probs.dim() == 2) && probs.size(-1) > 0,
              "multinomial: expected floating probabilities of shape (C) or (N, C) with C > 0, got {}",
              describe(probs));
  const int64_t C = probs.size(-1);
  NABLA_CHECK(num_samples > 0 && (options.replacement || num_samples <= C),
              "multinomial: num_samples must be in [1, {}] without replacement (any count >= 1 with), got {}",
              C, num_samples);
  if (probs.is_cpu()) check_rows(probs);
  NoGradGuard no_grad;
  const Tensor p = probs.dtype() == kFloat64 ? probs : probs.to(kFloat32);
  const Tensor log_p = log(p);
  auto gumbel_keys = [&] {
    const Tensor u = rand(p.sizes(), p.options(), options.generator);
    return log_p - log(-log(u));  // u = 0 gives key -inf: never drawn
  };
  if (!options.replacement) return topk(gumbel_keys(), num_samples).second;
  TensorList draws;
  for (int64_t s = 0; s < num_samples; ++s) draws.push_back(argmax(gumbel_keys(), -1, /*keepdim=*/true));
  return cat(draws, -1);
}

}  // namespace nabla
