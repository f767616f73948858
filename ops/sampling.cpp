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

// CPU only (on CUDA it would wait for the device): every row non-negative, finite and not all
// zero, with at least `needed` categories of non-zero probability.
void check_rows(const Tensor& p, int64_t needed) {
  const auto v = p.to(kFloat64).contiguous().to_vector<double>();
  const int64_t C = p.size(-1);
  for (size_t r = 0; r * C < v.size(); ++r) {
    int64_t nonzero = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double x = v[r * C + c];
      NABLA_CHECK(std::isfinite(x) && x >= 0,
                  "multinomial: row {} has the probability {} at {}; expected finite values >= 0", r, x, c);
      nonzero += x > 0;
    }
    NABLA_CHECK(nonzero > 0, "multinomial: row {} has no probability mass (every entry is 0)", r);
    NABLA_CHECK(
        nonzero >= needed,
        "multinomial: row {} has {} categories of non-zero probability, fewer than the {} samples asked "
        "for without replacement",
        r, nonzero, needed);
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
  if (probs.is_cpu()) check_rows(probs, options.replacement ? 1 : num_samples);
  NoGradGuard no_grad;
  const Tensor p = probs.dtype() == kFloat64 ? probs : probs.to(kFloat32);
  const Tensor log_p = log(p);
  auto gumbel_keys = [&] {
    // u in the open interval (0, 1): rand may give exactly 0, whose key would be -inf and could
    // then lose to a zero-probability category's -inf.
    const double tiny = p.dtype() == kFloat64 ? 0x1p-54 : 0x1p-25;
    const Tensor u = rand(p.sizes(), p.options(), options.generator) * (1.0 - 2 * tiny) + tiny;
    return log_p - log(-log(u));
  };
  if (!options.replacement) return topk(gumbel_keys(), num_samples).second;
  TensorList draws;
  for (int64_t s = 0; s < num_samples; ++s) draws.push_back(argmax(gumbel_keys(), -1, /*keepdim=*/true));
  return cat(draws, -1);
}

}  // namespace nabla
