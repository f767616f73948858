// MultiheadAttention and RMSNorm. The attention module is the projections and the head reshapes
// around nabla::scaled_dot_product_attention; its masks are converted from PyTorch's module
// convention (true hides) to one additive or boolean-keep mask for the op.
#include "nabla/nn/attention.h"

#include <limits>

#include "nabla/nn/init.h"
#include "nabla/ops/attention.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/linalg.h"
#include "nabla/ops/norm.h"
#include "nabla/ops/view.h"

namespace nabla::nn {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A module-convention mask (bool: true hides; floating: added) as an additive mask in `dtype`.
Tensor additive(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kBool) return mask.to(dtype);
  return where(mask, full({}, -kInf, {.dtype = dtype, .device = mask.device()}),
               zeros({}, {.dtype = dtype, .device = mask.device()}));
}

// The options checked before any member is built, so a bad one gets this module's message.
LinearOptions checked_out_proj(const MultiheadAttentionOptions& o) {
  NABLA_CHECK(o.embed_dim > 0 && o.num_heads > 0 && o.embed_dim % o.num_heads == 0,
              "MultiheadAttention: embed_dim ({}) must be > 0 and divisible by num_heads ({})", o.embed_dim,
              o.num_heads);
  NABLA_CHECK(o.dropout >= 0 && o.dropout < 1, "MultiheadAttention: dropout must be in [0, 1), got {}",
              o.dropout);
  return {.in = o.embed_dim, .out = o.embed_dim, .bias = o.bias, .tensor_options = o.tensor_options};
}

}  // namespace

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& options)
    : out_proj(checked_out_proj(options)), options_(options) {
  const int64_t E = options.embed_dim;
  // PyTorch's _reset_parameters: xavier_uniform_ in_proj_weight, zero biases; out_proj.weight
  // keeps Linear's initialization.
  in_proj_weight = empty({3 * E, E}, options.tensor_options);
  init::xavier_uniform_(in_proj_weight);
  if (options.bias) {
    in_proj_bias = zeros({3 * E}, options.tensor_options);
    init::zeros_(out_proj.bias);
  }
  register_parameter("in_proj_weight", in_proj_weight);
  register_parameter("in_proj_bias", in_proj_bias);
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return forward(x, x, x);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks) {
  const int64_t E = options_.embed_dim, H = options_.num_heads, D = E / H;
  for (const Tensor* t : {&query, &key, &value}) {
    NABLA_CHECK(t->defined() && t->dim() == 3 && t->size(2) == E,
                "MultiheadAttention: query, key and value must be 3-d with {} features ({}), got {}", E,
                options_.batch_first ? "(N, L, E)" : "(L, N, E)", t->defined() ? describe(*t) : "undefined");
  }
  // (N, T, E) from here on.
  auto batch_major = [&](const Tensor& t) { return options_.batch_first ? t : t.transpose(0, 1); };
  const Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  const int64_t N = q_in.size(0), L = q_in.size(1), S = k_in.size(1);
  NABLA_CHECK(k_in.size(0) == N && v_in.size(0) == N && v_in.size(1) == S,
              "MultiheadAttention: query {}, key {} and value {} disagree on the batch or the key length",
              describe(query), describe(key), describe(value));

  const TensorList w = chunk(in_proj_weight, 3, 0);
  const TensorList b = in_proj_bias.defined() ? chunk(in_proj_bias, 3, 0) : TensorList(3);
  TensorList qkv(3);
  if (query.is_same(key) && key.is_same(value)) {
    qkv = chunk(linear(q_in, in_proj_weight, in_proj_bias), 3, -1);  // one GEMM for self-attention
  } else {
    qkv = {linear(q_in, w[0], b[0]), linear(k_in, w[1], b[1]), linear(v_in, w[2], b[2])};
  }
  // (N, T, E) -> (N, H, T, D)
  auto heads = [&](const Tensor& t, int64_t T) { return t.reshape({N, T, H, D}).transpose(1, 2); };

  Tensor mask;
  const DType dtype = qkv[0].dtype();
  if (masks.attn_mask.defined()) {
    const Tensor& m = masks.attn_mask;
    NABLA_CHECK((m.dim() == 2 && m.size(0) == L && m.size(1) == S) ||
                    (m.dim() == 3 && m.size(0) == N * H && m.size(1) == L && m.size(2) == S),
                "MultiheadAttention: attn_mask must be ({}, {}) or ({}, {}, {}), got {}", L, S, N * H, L, S,
                describe(m));
    mask = additive(m, dtype);
    if (m.dim() == 3) mask = mask.reshape({N, H, L, S});
  }
  if (masks.key_padding_mask.defined()) {
    const Tensor& m = masks.key_padding_mask;
    NABLA_CHECK(m.dim() == 2 && m.size(0) == N && m.size(1) == S,
                "MultiheadAttention: key_padding_mask must be ({}, {}), got {}", N, S, describe(m));
    const Tensor padding = additive(m, dtype).reshape({N, 1, 1, S});
    mask = mask.defined() ? mask + padding : padding;
  }
  const double p = is_training() ? options_.dropout : 0.0;
  const Tensor y = scaled_dot_product_attention(heads(qkv[0], L), heads(qkv[1], S), heads(qkv[2], S),
                                                {.causal = masks.causal, .mask = mask, .dropout = p});
  const Tensor out = out_proj(y.transpose(1, 2).reshape({N, L, E}));  // (N, L, E)
  return options_.batch_first ? out : out.transpose(0, 1);
}

RMSNorm::RMSNorm(Shape normalized_shape, const RMSNormOptions& options)
    : normalized_shape_(std::move(normalized_shape)), options_(options) {
  NABLA_CHECK(!normalized_shape_.empty(), "RMSNorm: normalized_shape must name at least one dim");
  if (options.elementwise_affine) weight = ones(normalized_shape_, options.tensor_options);
  register_parameter("weight", weight);
}

Tensor RMSNorm::forward(const Tensor& x) {
  return rms_norm(x, normalized_shape_, weight, {.eps = options_.eps});
}

}  // namespace nabla::nn
