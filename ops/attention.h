// Public header. Scaled dot-product attention, as torch.nn.functional.scaled_dot_product_attention.
//
//   auto y = nabla::scaled_dot_product_attention(q, k, v, {.causal = true});  // (B, H, T, D)
//
// q is (..., Tq, D), k is (..., Tk, D) and v is (..., Tk, Dv), with the same leading dims (for a
// transformer (B, H)). The result is (..., Tq, Dv):
//   softmax(q k^T * scale + mask) v,   scale = 1 / sqrt(D) unless given.
// - causal: query i attends to keys 0..i (the mask is lower-triangular, aligned at the top left
//   as PyTorch's is_causal; with Tq != Tk that is tril(ones(Tq, Tk))).
// - mask: additive (a floating tensor added to the scores) or boolean (true = attend), of any
//   shape that broadcasts to (..., Tq, Tk). It may be combined with causal.
// - dropout: the probability of dropping an attention weight (training only; 0 = none).
// - enable_gqa: grouped-query attention, as PyTorch's enable_gqa. k and v may have fewer heads
//   (dim -3) than q, Hkv dividing Hq; query head h attends with key/value head h / (Hq / Hkv), as
//   repeating each key/value head Hq / Hkv times in place would (Hugging Face's repeat_kv). The
//   fused paths read the shared heads directly and sum their gradients over each group in the
//   kernel; the math path repeats them. Without it the head counts must be equal.
// A query row that every mask hides has softmax weights of 0/0: its output is NaN, as PyTorch's
// math path gives.
//
// On CUDA, float16 and bfloat16 inputs with head sizes up to 128 run fused, in flash-attention
// style: forward and backward never write the (Tq, Tk) scores to memory, so attention adds
// O(B H T D) to the peak, not O(B H T^2). Two fused implementations exist: cuDNN's fused attention
// (built through its backend graph API; without a mask) and nabla's own kernels
// (ops/cuda/attention/flash_forward.cu; any mask). Other inputs (float32/float64, the CPU, dropout > 0) take
// the math path, composed of matmul, softmax and dropout, which does keep the scores.
// docs/design/attention.md describes the paths and their limits.
#pragma once

#include <optional>

#include "nabla/core/generator.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/rotary.h"  // rotary embeddings, attention's usual companion

namespace nabla {

// Which implementation runs, as PyTorch's sdpa_kernel. automatic: cuDNN's fused attention where
// it takes the inputs, else nabla's flash kernels where they do, else the math path. The others
// force one path and fail with the reason when it cannot take the inputs.
enum class AttentionBackend { automatic, cudnn, flash, math };

struct AttentionOptions {
  bool causal = false;
  Tensor mask = {};                  // additive or boolean, broadcastable to (..., Tq, Tk)
  double dropout = 0.0;              // in [0, 1)
  std::optional<double> scale = {};  // default 1 / sqrt(D)
  Generator* generator = nullptr;    // for dropout; nullptr: the default generator of q's device
  AttentionBackend backend = AttentionBackend::automatic;
  bool enable_gqa = false;  // k and v may have fewer heads than q (a divisor of q's)
};

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

}  // namespace nabla
