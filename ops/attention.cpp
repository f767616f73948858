// scaled_dot_product_attention front end: validation, autocast, and the choice between the fused
// path (the backend's, through the seam of ops/detail/attention.h) and the math path composed of
// differentiable ops.
//
// The math path writes the (..., Tq, Tk) scores and keeps them for the backward, as PyTorch's
// math backend does; it is the reference the fused kernels are tested against, and it serves
// what they do not take (float32/float64, the CPU, dropout, a mask that needs a gradient). The
// fused path saves q, k, v, the output and one float32 log-sum-exp per query row, and its
// backward recomputes the scores tile by tile. docs/design/attention.md.
#include "nabla/ops/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/attention.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/dropout.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/linalg.h"
#include "nabla/ops/masking.h"
#include "nabla/ops/routes.h"
#include "nabla/ops/softmax.h"
#include "nabla/ops/view.h"

namespace nabla {

using autograd::BackwardContext;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr double kInf = std::numeric_limits<double>::infinity();

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  ops::check_defined(kOp, q, "query");
  ops::check_defined(kOp, k, "key");
  ops::check_defined(kOp, v, "value");
  ops::check_same_device(kOp, {q, k, v, o.mask});
  NABLA_CHECK(q.is_floating_point() && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
              "{}: query, key and value must share one floating dtype, got {}, {} and {}", kOp, describe(q),
              describe(k), describe(v));
  NABLA_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim(),
              "{}: query, key and value must be (..., T, D) with the same number of dims, got {}, {} and {}",
              kOp, describe(q), describe(k), describe(v));
  const int64_t n = q.dim();
  // With enable_gqa the heads (dim -3) may differ: k's and v's must divide q's.
  const int64_t heads_dim = o.enable_gqa ? n - 3 : -1;
  NABLA_CHECK(!o.enable_gqa || n >= 3,
              "{}: enable_gqa needs (..., H, T, D) inputs with a heads dim, got {}, {} and {}", kOp,
              describe(q), describe(k), describe(v));
  bool same_batch = true;
  for (int64_t d = 0; d < n - 2; ++d) {
    if (d == heads_dim) continue;
    same_batch = same_batch && q.size(d) == k.size(d) && q.size(d) == v.size(d);
  }
  NABLA_CHECK(
      same_batch && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
      "{}: expected query (..., Tq, D), key (..., Tk, D) and value (..., Tk, Dv) with the same leading "
      "dims{}, got {}, {} and {}",
      kOp, o.enable_gqa ? " (but the heads, dim -3)" : " (enable_gqa lets key and value have fewer heads)",
      shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  if (o.enable_gqa) {
    const int64_t hq = q.size(-3), hk = k.size(-3);
    NABLA_CHECK(hk == v.size(-3) && hk > 0 && hq % hk == 0,
                "{}: with enable_gqa, key and value need one head count that divides the query's {}, got "
                "key {} and value {} heads",
                kOp, hq, hk, v.size(-3));
  }
  NABLA_CHECK(o.dropout >= 0 && o.dropout < 1, "{}: dropout must be in [0, 1), got {}", kOp, o.dropout);
  NABLA_CHECK(!o.scale || (std::isfinite(*o.scale) && *o.scale > 0),
              "{}: scale must be finite and > 0, got {}", kOp, o.scale.value_or(0));
  if (o.mask.defined()) {
    NABLA_CHECK(o.mask.dtype() == kBool || o.mask.is_floating_point(),
                "{}: the mask must be bool (true = attend) or floating (added to the scores), got {}", kOp,
                describe(o.mask));
    Shape scores = q.sizes();
    scores.back() = k.size(-2);
    NABLA_CHECK(o.mask.dim() <= n && broadcast_shapes(o.mask.sizes(), scores, kOp) == scores,
                "{}: the mask {} does not broadcast to the scores' shape {}", kOp, shape_str(o.mask.sizes()),
                shape_str(scores));
  }
}

// Grouped-query attention's key/value heads repeated for the math path: head j of t (..., Hkv, T, D)
// becomes heads j * g .. j * g + g - 1 of the result (..., Hkv * g, T, D), as repeat_interleave.
Tensor repeat_heads(const Tensor& t, int64_t g) {
  if (g == 1) return t;
  Shape grouped = t.sizes(), repeated = t.sizes();
  grouped.insert(grouped.end() - 2, g);
  repeated[repeated.size() - 3] *= g;
  return t.unsqueeze(-3).expand(grouped).reshape(repeated);
}

// softmax(q k^T * scale + mask) v, with every step an ordinary differentiable op.
Tensor math_attention(const Tensor& q, const Tensor& k_in, const Tensor& v_in, const AttentionOptions& o,
                      double scale) {
  const int64_t groups = o.enable_gqa ? q.size(-3) / k_in.size(-3) : 1;
  const Tensor k = repeat_heads(k_in, groups), v = repeat_heads(v_in, groups);
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;  // (..., Tq, Tk)
  if (o.causal) {
    const Tensor all = ones({q.size(-2), k.size(-2)}, {.dtype = kBool, .device = q.device()});
    scores = masked_fill(scores, triu(all, {.diagonal = 1}), -kInf);  // key j > query i
  }
  if (o.mask.defined()) {
    scores =
        o.mask.dtype() == kBool ? where(o.mask, scores, full({}, -kInf, scores.options())) : scores + o.mask;
  }
  Tensor weights = softmax(scores, -1).to(q.dtype());
  if (o.dropout > 0) weights = dropout(weights, {.p = o.dropout, .training = true, .generator = o.generator});
  return matmul(weights, v);
}

// The mask as the fused kernels read it: float32, additive, viewed as (B, H, Tq, Tk) with
// stride 0 on broadcast dims (no copy beyond the dtype conversion).
Tensor additive_mask(const Tensor& mask, const Tensor& q, const Tensor& k) {
  if (!mask.defined()) return mask;
  Tensor m = mask.dtype() == kBool
                 ? where(mask, zeros({}, {.device = q.device()}), full({}, -kInf, {.device = q.device()}))
                 : mask.to(kFloat32);
  while (m.dim() < 4) m = m.unsqueeze(0);
  return m.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

// Why the fused paths cannot take these inputs, or "" when they can.
std::string fused_problem(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  if (!q.is_cuda()) return "the fused paths are CUDA only";
  if (q.dim() != 4) return "the fused paths take (B, H, T, D) inputs";
  if (o.dropout > 0) return "the fused paths take no dropout";
  if (o.mask.defined() && o.mask.requires_grad() && GradMode::is_enabled()) {
    return "the fused paths give no gradient for the mask";
  }
  const bool ok =
      ops::on_fused_attention(kOp, q, [&](const ops::FusedAttention& f) { return f.takes(q, k, v); });
  return ok ? ""
            : "the fused paths take float16/bfloat16 with D == Dv, a multiple of 8 up to 128, and key and "
              "value heads that divide the query's";
}

const char* backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::automatic:
      return "automatic";
    case AttentionBackend::cudnn:
      return "cudnn";
    case AttentionBackend::flash:
      return "flash";
    case AttentionBackend::math:
      return "math";
  }
  return "?";
}

// The last dim must be dense for the kernels; the others may have any strides.
Tensor unit_last_stride(const Tensor& t) {
  return t.stride(-1) == 1 ? t : t.contiguous();
}

// Note [Attention layouts]: the kernels write any strides (unit last stride), so the output and
// the gradients are laid out for what a transformer does next. The output is (B, H, Tq, D) viewed
// from a (B, Tq, H, D) buffer, so out.transpose(1, 2).reshape({B, Tq, H * D}) is a view. When q,
// k and v are pieces of one buffer that they cover exactly, in the same layout (chunk(qkv, 3, -1)
// of one projection, viewed as heads), dq, dk and dv are written into one new buffer of that
// layout: they reach the heads' view and transpose backward as views, and the split backward
// takes them side by side without a copy (Note [Split backward], ops/indexing.cpp).

// The highest storage offset `t` (not empty) reaches, plus one.
int64_t end_offset(const Tensor& t) {
  return t.storage_offset() + ops::layout_extent(t.sizes(), t.strides());
}

// dq, dk, dv: views of one buffer laid out as q, k and v lie in theirs, when q, k and v are equally
// shaped and strided pieces of one storage, a constant distance apart, that together cover it
// densely (so the three can never overlap); otherwise separate tensors, each in its input's dense layout
// (contiguous where that is not dense).
std::array<Tensor, 3> gradient_buffers(const Tensor& q, const Tensor& k, const Tensor& v) {
  // Each in its input's layout (Note [Gradients in their input's layout] in ops/detail/alias.h):
  // a v that is the heads' view of a projection gets a dv that goes back through it as a view.
  const auto like = [](const Tensor& t) {
    return ops::empty_strided(t.sizes(), ops::dense_strides_like(t), t.options());
  };
  const auto separate = [&] { return std::array<Tensor, 3>{like(q), like(k), like(v)}; };
  if (q.storage().get() != k.storage().get() || q.storage().get() != v.storage().get() ||
      q.sizes() != k.sizes() || q.sizes() != v.sizes() || q.strides() != k.strides() ||
      q.strides() != v.strides() || q.numel() == 0) {
    return separate();
  }
  std::array<int64_t, 3> offsets = {q.storage_offset(), k.storage_offset(), v.storage_offset()};
  std::array<int64_t, 3> sorted = offsets;
  std::sort(sorted.begin(), sorted.end());
  const int64_t gap = sorted[1] - sorted[0];
  if (gap <= 0 || sorted[2] - sorted[1] != gap) return separate();
  // The three as one tensor with a leading dim of 3: dense means they tile their span exactly.
  Shape sizes = q.sizes(), strides = q.strides();
  sizes.insert(sizes.begin(), 3);
  strides.insert(strides.begin(), gap);
  if (!is_non_overlapping_and_dense(sizes, strides)) return separate();
  const int64_t base = sorted[0];
  NABLA_ASSERT(end_offset(q) - base <= 3 * q.numel() && end_offset(v) - base <= 3 * q.numel(),
               "scaled_dot_product_attention: gradient buffer layout");
  const Tensor flat = Tensor::empty({3 * q.numel()}, q.options());
  std::array<Tensor, 3> out;
  for (size_t i = 0; i < 3; ++i) out[i] = ops::alias(flat, q.sizes(), q.strides(), offsets[i] - base);
  return out;
}

Tensor fused_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const AttentionOptions& o,
                       double scale) {
  const Tensor q = unit_last_stride(q_in), k = unit_last_stride(k_in), v = unit_last_stride(v_in);
  const ops::AttentionCall call{.q = q,
                                .k = k,
                                .v = v,
                                .mask = additive_mask(o.mask, q, k),
                                .causal = o.causal,
                                .scale = scale,
                                .backend = o.backend};
  // (B, H, Tq, D), viewed from a (B, Tq, H, D) buffer: Note [Attention layouts].
  Tensor out = Tensor::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options()).transpose(1, 2);
  Tensor lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, {.dtype = kFloat32, .device = q.device()});
  ops::on_fused_attention(kOp, q, [&](const ops::FusedAttention& f) { f.forward(call, out, lse); });
  if (autograd::needs_grad({q_in, k_in, v_in})) {
    const bool deterministic = routes().cudnn_deterministic;
    autograd::record(
        "ScaledDotProductAttentionBackward", {q_in, k_in, v_in}, {out}, {q, k, v, out, lse, call.mask},
        [causal = o.causal, scale, backend = o.backend, deterministic](BackwardContext& ctx) -> TensorList {
          const auto& s = ctx.saved;
          NABLA_CHECK(!GradMode::is_enabled(),
                      "{}: double backward through the fused kernels is not "
                      "supported; use float32 for create_graph",
                      kOp);
          const std::array<Tensor, 3> d = gradient_buffers(s[0], s[1], s[2]);
          const Tensor &dq = d[0], &dk = d[1], &dv = d[2];
          const Tensor dout = unit_last_stride(ctx.grad());  // any other strides
          const ops::AttentionCall saved{.q = s[0],
                                         .k = s[1],
                                         .v = s[2],
                                         .mask = s[5],
                                         .causal = causal,
                                         .scale = scale,
                                         .backend = backend};
          ops::on_fused_attention(kOp, dout, [&](const ops::FusedAttention& f) {
            f.backward(saved, dout, s[3], s[4], deterministic, dq, dk, dv);
          });
          return {dq, dk, dv};
        });
  }
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_arg, const Tensor& k_arg, const Tensor& v_arg,
                                    const AttentionOptions& options) {
  // Autocast: lower precision, as matmul (PyTorch's list has it there too); the mask keeps its dtype.
  const auto [q, k, v] = ops::autocast(ops::AutocastCategory::LowerPrecision, {q_arg, k_arg, v_arg});
  check_inputs(q, k, v, options);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (options.backend == AttentionBackend::math) return math_attention(q, k, v, options, scale);
  const std::string problem = fused_problem(q, k, v, options);
  if (problem.empty()) return fused_attention(q, k, v, options, scale);
  NABLA_CHECK(options.backend == AttentionBackend::automatic, "{}: backend {} cannot take these inputs: {}",
              kOp, backend_name(options.backend), problem);
  return math_attention(q, k, v, options, scale);
}

}  // namespace nabla
