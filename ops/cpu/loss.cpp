// CPU negative log-likelihood pick (forward) and its scatter (backward, written as a gather
// over every element of grad_logp so that no zero-fill pass is needed).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/cpu/loss_kernels.h"

namespace nabla::ops::cpu {

namespace {

// The dtype of cross_entropy's per-row loss and log-sum-exp: float64 for float64 logits, float32
// otherwise (as the front end allocates them).
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace

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

std::optional<int64_t> cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                             double label_smoothing, const Tensor& loss, const Tensor& lse) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* tp = target.data_ptr<int64_t>();
  for (int64_t i = 0; i < N; ++i) {
    if (tp[i] != ignore_index && (tp[i] < 0 || tp[i] >= C)) return tp[i];
  }
  dispatch<TypeSet::Floating>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    using P = stat_t<T>;
    const T* x = logits.data_ptr<T>();
    P* lp = loss.data_ptr<P>();
    P* sp = lse.data_ptr<P>();
#pragma omp parallel for if (N * C > kParallelGrain)
    for (int64_t n = 0; n < N; ++n) {
      const T* row = x + n * C;
      double top = -INFINITY, sum = 0, total = 0;
      for (int64_t c = 0; c < C; ++c) top = std::max(top, static_cast<double>(row[c]));
      for (int64_t c = 0; c < C; ++c) {
        sum += std::exp(static_cast<double>(row[c]) - top);
        total += static_cast<double>(row[c]);
      }
      const double l = top + std::log(sum);
      sp[n] = static_cast<P>(l);
      const int64_t t = tp[n];
      if (t == ignore_index) {  // an ignored row has no class to read (ignore_index may be -100)
        lp[n] = P(0);
        continue;
      }
      // The smoothing term only when smoothing is on: with a -inf logit (a masked class) the mean
      // over classes is -inf, and 0 * inf would make the loss NaN.
      double value = l - static_cast<double>(row[t]);
      if (label_smoothing > 0) {
        value = (1 - label_smoothing) * value + label_smoothing * (l - total / static_cast<double>(C));
      }
      lp[n] = static_cast<P>(value);
    }
  });
  return std::nullopt;
}

void cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, const Tensor& lse,
                            int64_t ignore_index, double label_smoothing, const Tensor& grad_logits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* tp = target.data_ptr<int64_t>();
  dispatch<TypeSet::Floating>(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using P = stat_t<T>;
    const T* x = logits.data_ptr<T>();
    const P* gp = grad.data_ptr<P>();
    const P* sp = lse.data_ptr<P>();
    T* gx = grad_logits.data_ptr<T>();
    const double uniform = label_smoothing / static_cast<double>(C);
#pragma omp parallel for if (N * C > kParallelGrain)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = tp[n];
      const bool kept = t != ignore_index;
      const double g = kept ? static_cast<double>(gp[n]) : 0.0, l = static_cast<double>(sp[n]);
      for (int64_t c = 0; c < C; ++c) {
        const double p = std::exp(static_cast<double>(x[n * C + c]) - l);
        gx[n * C + c] = static_cast<T>(g * (p - uniform - (c == t ? 1 - label_smoothing : 0.0)));
      }
    }
  });
}

}  // namespace nabla::ops::cpu
