// Internal (ops/cuda/batch_norm*.cu only). What nabla's batch-norm kernels compute from a
// channel's two totals, kept apart from the finishing kernels that use them (batch_norm/batch_norm.cu) so
// that each formula reads on its own. Each leaves per-channel coefficients for the elementwise pass, [K][C]
// in one buffer, so no element divides or looks up more than its channel's K values:
//  forward  (K = 3): y = (x - mean) * scale + shift, scale = invstd * w, shift = b;
//  backward (K = 5): dx = (g - g_mean - (x - mean) * proj) * invstd * w, g_mean = mean(g),
//                    proj = mean(g * (x - mean)) * invstd^2 (invstd and w apart, so dx rounds
//                    as it did when each element looked them up);
//            (K = 7): and the forward's scale and shift, for the ReLU's mask from x.
#pragma once

#include "nabla/ops/cuda/batch_norm/vectors.cuh"
#include "nabla/ops/cuda/common.cuh"

namespace nabla::ops::cuda::batch_norm_detail {

enum ForwardCoef { kMean, kScale, kShift, kForwardCoefs };
enum BackwardCoef {
  kXMean,
  kGradMean,
  kProj,
  kInvstd,
  kWeight,
  kBackwardCoefs,
  kFwdScale = kBackwardCoefs,
  kFwdShift,
  kBackwardMaskCoefs
};

// Where the forward's results go. w and b may be null (ones, zeros); running_mean null: no
// running statistics.
template <typename A>
struct StatsOut {
  const A* w;
  const A* b;
  A* save_mean;
  A* save_invstd;
  A* running_mean;
  A* running_var;
  A* coef;
};

// Channel c's statistics from its shifted sums s0 = sum(x - k), s1 = sum((x - k)^2) over
// `count` elements, k its first x; the running statistics follow PyTorch (unbiased variance).
template <typename A>
__device__ void finish_stats(int64_t c, int64_t channels, A s0, A s1, A k, int64_t count, double eps,
                             double momentum, const StatsOut<A>& o) {
  const A n = static_cast<A>(count);
  const A shifted_mean = s0 / n;
  A var = s1 / n - shifted_mean * shifted_mean;
  var = var > A(0) ? var : A(0);
  const A mean = k + shifted_mean;
  const A invstd = A(1) / sqrt(var + static_cast<A>(eps));
  o.save_mean[c] = mean;
  o.save_invstd[c] = invstd;
  o.coef[kMean * channels + c] = mean;
  o.coef[kScale * channels + c] = o.w ? invstd * o.w[c] : invstd;
  o.coef[kShift * channels + c] = o.b ? o.b[c] : A(0);
  if (o.running_mean) {
    const A m = static_cast<A>(momentum);
    o.running_mean[c] = (A(1) - m) * o.running_mean[c] + m * mean;
    o.running_var[c] = (A(1) - m) * o.running_var[c] + m * var * n / (n - A(1));
  }
}

// What the backward reads and writes per channel. w and b may be null (ones, zeros); dweight
// and dbias null: not wanted.
template <typename A>
struct GradOut {
  const A* mean;
  const A* invstd;
  const A* w;
  const A* b;
  bool mask_from_x;
  A* coef;
  A* dweight;
  A* dbias;
};

// Channel c's backward coefficients and parameter gradients from s0 = sum(g) and
// s1 = sum(g * (x - mean)) over `count` elements.
template <typename A>
__device__ void finish_grads(int64_t c, int64_t channels, A s0, A s1, int64_t count, const GradOut<A>& o) {
  const A n = static_cast<A>(count), is = o.invstd[c];
  o.coef[kXMean * channels + c] = o.mean[c];
  o.coef[kGradMean * channels + c] = s0 / n;
  o.coef[kProj * channels + c] = s1 / n * is * is;
  o.coef[kInvstd * channels + c] = is;
  o.coef[kWeight * channels + c] = o.w ? o.w[c] : A(1);
  if (o.mask_from_x) {  // as finish_stats made them
    o.coef[kFwdScale * channels + c] = o.w ? is * o.w[c] : is;
    o.coef[kFwdShift * channels + c] = o.b ? o.b[c] : A(0);
  }
  if (o.dweight) o.dweight[c] = s1 * is;
  if (o.dbias) o.dbias[c] = s0;
}

// ---- the elementwise formulas, from the coefficients -------------------------------------------

// y = relu((x - mean) * scale + shift + z) over V values in place (v holds x), z (when `add`)
// and the ReLU optional. z by reference, not pointer: a pointer to the caller's array would put
// it in local memory.
template <typename A, int V, int K>
__device__ __forceinline__ void normalize_values(A (&v)[V], const A (&z)[V], bool add, bool relu,
                                                 const ChannelCoefs<A, V, K>& k) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    v[j] = batch_normalized(v[j], k.v[kMean][j], k.v[kScale][j], k.v[kShift][j]);
    if (add) v[j] += z[j];
    if (relu) v[j] = v[j] > A(0) ? v[j] : A(0);
  }
}

// dx over V values in place (g holds the masked gradient), from x's values.
template <typename A, int V, int K>
__device__ __forceinline__ void grad_input_values(A (&g)[V], const A (&x)[V],
                                                  const ChannelCoefs<A, V, K>& k) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const A centered = g[j] - k.v[kGradMean][j] - (x[j] - k.v[kXMean][j]) * k.v[kProj][j];
    g[j] = centered * k.v[kInvstd][j] * k.v[kWeight][j];
  }
}

}  // namespace nabla::ops::cuda::batch_norm_detail
