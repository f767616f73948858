// CPU negative log-likelihood pick (forward) and its scatter (backward, written as a gather
// over every element of grad_logp so that no zero-fill pass is needed).
#include <algorithm>

#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/cpu/loss_kernels.h"

namespace nabla::ops::cpu {

std::optional<int64_t> nll_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index,
                                   const Tensor& out) {
  const int64_t N = logp.size(0), C = logp.size(1), S = logp.size(2);
  const int64_t* tp = target.data_ptr<int64_t>();
  // Checked first, so that no thread reads out of bounds.
  for (int64_t i = 0; i < N * S; ++i) {
    if (tp[i] != ignore_index && (tp[i] < 0 || tp[i] >= C)) return tp[i];
  }
  dispatch<TypeSet::Floating>(logp.dtype(), "nll_loss", [&]<typename T>() {
    const T* lp = logp.data_ptr<T>();
    T* op = out.data_ptr<T>();
#pragma omp parallel for if (N * S > kParallelGrain)
    for (int64_t i = 0; i < N * S; ++i) {
      const int64_t n = i / S, s = i % S, t = tp[i];
      op[i] = t == ignore_index ? T(0) : static_cast<T>(-static_cast<compute_t<T>>(lp[(n * C + t) * S + s]));
    }
  });
  return std::nullopt;
}

void nll_backward(const Tensor& grad, const Tensor& target, int64_t ignore_index, const Tensor& grad_logp) {
  const int64_t N = grad_logp.size(0), C = grad_logp.size(1), S = grad_logp.size(2);
  const int64_t* tp = target.data_ptr<int64_t>();
  dispatch<TypeSet::Floating>(grad.dtype(), "nll_loss_backward", [&]<typename T>() {
    const T* gp = grad.data_ptr<T>();
    T* gl = grad_logp.data_ptr<T>();
#pragma omp parallel for if (N * C * S > kParallelGrain)
    for (int64_t n = 0; n < N; ++n) {
      std::fill(gl + n * C * S, gl + (n + 1) * C * S, T(0));
      for (int64_t s = 0; s < S; ++s) {
        const int64_t t = tp[n * S + s];
        if (t != ignore_index && t >= 0 && t < C) {
          gl[(n * C + t) * S + s] = static_cast<T>(-static_cast<compute_t<T>>(gp[n * S + s]));
        }
      }
    }
  });
}

}  // namespace nabla::ops::cpu
