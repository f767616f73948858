// Front ends for matrix products: matmul (numpy semantics), mm, bmm and linear.
//
// matmul reduces every case to one batched GEMM: a 1-d operand gains a unit dim (which the
// output drops again), the batch dims broadcast, and expanded operands keep stride 0 so nothing
// is copied. When only `a` has batch dims, (B, N, K) @ (K, M) folds into one (B*N, K) @ (K, M)
// product. On the CPU float16 and bfloat16 compute in float32 and round once at the end; on
// CUDA cuBLASLt takes them as they are (float32 accumulation), reads transposed operands in
// place, and linear adds its bias in the GEMM's epilogue. Backward passes are written with
// matmul itself, so they broadcast the same way and support create_graph.
#include "nabla/ops/linalg.h"

#include <tuple>
#include <utility>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/engine.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cpu/linalg_kernels.h"
#include "nabla/ops/cuda/linalg/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/routes.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

Shape batch_dims(const Tensor& t) {
  return Shape(t.sizes().begin(), t.sizes().end() - 2);
}

Shape concat(Shape front, std::initializer_list<int64_t> back) {
  front.insert(front.end(), back);
  return front;
}

// (..., C) -> (rows, C), copying only when the strides leave no other way.
Tensor flatten_rows(const Tensor& t) {
  const int64_t cols = t.size(-1);
  return t.reshape({numel_of(Shape(t.sizes().begin(), t.sizes().end() - 1)), cols});
}

void check_floating_pair(const char* op, const Tensor& a, const Tensor& b) {
  NABLA_CHECK(
      is_floating(a.dtype()) && is_floating(b.dtype()),
      "{}: expected floating-point operands, got {} and {}; integer matrix products are not supported, "
      "convert with .to(nabla::kFloat32)",
      op, describe(a), describe(b));
  NABLA_CHECK(a.dtype() == b.dtype(),
              "{}: expected operands of one dtype, got {} and {}; convert one with .to()", op, describe(a),
              describe(b));
}

bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    int64_t da = a[a.size() - i], db = b[b.size() - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

// a (..., N, K) @ b (..., K, M) -> (broadcast batch..., N, M). Both at least 2-d, one floating
// dtype, shapes already checked. Records no history.
Tensor product(const Tensor& a, const Tensor& b, bool tf32) {
  NoGradGuard no_grad;
  const DType dtype = a.dtype();
  if (a.is_cpu() && is_reduced_float(dtype)) return product(a.to(kFloat32), b.to(kFloat32), tf32).to(dtype);
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  if (b.dim() == 2 && a.dim() > 2) {
    // Only `a` has batch dims: one tall product instead of many small ones.
    Tensor out = product(flatten_rows(a), b, tf32);  // (B*N, M)
    Shape out_sizes = concat(batch_dims(a), {n, m});
    return ops::alias(out, out_sizes, contiguous_strides(out_sizes), out.storage_offset());
  }
  const Shape batch = broadcast_shapes(batch_dims(a), batch_dims(b), "matmul");
  Tensor out = Tensor::empty(concat(batch, {n, m}), a.options());
  ops::dispatch(
      "matmul", a,
      [&] {
        Tensor ae = ops::cpu::is_gemm_operand(a) ? a : a.contiguous();
        Tensor be = ops::cpu::is_gemm_operand(b) ? b : b.contiguous();
        ops::cpu::gemm(ae.expand(concat(batch, {n, k})), be.expand(concat(batch, {k, m})), out,
                       /*accumulate=*/false);
      },
      [&] {
        Tensor ae = ops::cuda::is_gemm_operand(a) ? a : a.contiguous();
        Tensor be = ops::cuda::is_gemm_operand(b) ? b : b.contiguous();
        ops::cuda::gemm(ae.expand(concat(batch, {n, k})), be.expand(concat(batch, {k, m})), out,
                        {.bias = Tensor(), .allow_tf32 = tf32});
      });
  return out;
}

// Gradients of matmul(a, b) for any operand ranks: the 1-d promotions are redone on the saved
// inputs and the gradient, and sum_to folds broadcast batch dims back.
Tensor matmul_op(const char* op, const Tensor& a_in, const Tensor& b_in, bool tf32);

TensorList matmul_backward(const Tensor& grad, const Tensor& a, const Tensor& b, bool need_a, bool need_b,
                           bool tf32) {
  const auto mat = [tf32](const Tensor& l, const Tensor& r) { return matmul_op("matmul", l, r, tf32); };
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;  // (..., N, K)
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;  // (..., K, M)
  Tensor g = grad;                                // (..., N, M) once the dropped dims are back
  if (b.dim() == 1) g = g.unsqueeze(g.dim());
  if (a.dim() == 1) g = g.unsqueeze(g.dim() - 1);
  Tensor grad_a, grad_b;
  if (need_a) grad_a = sum_to(mat(g, b2.transpose(-1, -2)), a2.sizes()).reshape(a.sizes());
  if (need_b) {
    if (b2.dim() == 2 && a2.dim() > 2) {
      // b was shared by every batch entry: one (K, B*N) @ (B*N, M) product sums over the batch.
      grad_b = mat(flatten_rows(a2).t(), flatten_rows(g));
    } else {
      grad_b = sum_to(mat(a2.transpose(-1, -2), g), b2.sizes());
    }
    grad_b = grad_b.reshape(b.sizes());
  }
  return {grad_a, grad_b};
}

// `tf32` is the forward's Routes::matmul_tf32, kept by the backward so both run one route.
Tensor matmul_op(const char* op, const Tensor& a_in, const Tensor& b_in, bool tf32) {
  ops::check_defined(op, a_in, "a");
  ops::check_defined(op, b_in, "b");
  // Autocast: lower precision (matmul, mm and bmm all come here).
  const auto [a, b] = ops::autocast(ops::AutocastCategory::LowerPrecision, {a_in, b_in});
  ops::check_same_device(op, {a, b});
  check_floating_pair(op, a, b);
  NABLA_CHECK(a.dim() >= 1 && b.dim() >= 1, "{}: expected operands of at least 1 dim, got {} and {}", op,
              describe(a), describe(b));
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  const int64_t k_a = a.size(-1), k_b = b_vec ? b.size(0) : b.size(-2);
  NABLA_CHECK(k_a == k_b, "{}: shapes {} and {} cannot be multiplied (a has {} columns, b has {} rows)", op,
              describe(a), describe(b), k_a, k_b);
  const Shape a_batch = a.dim() > 2 ? batch_dims(a) : Shape{},
              b_batch = b.dim() > 2 ? batch_dims(b) : Shape{};
  NABLA_CHECK(broadcastable(a_batch, b_batch), "{}: the batch dims of {} and {} do not broadcast", op,
              describe(a), describe(b));

  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor a2 = a_vec ? a.unsqueeze(0) : a;
    Tensor b2 = b_vec ? b.unsqueeze(1) : b;
    out = product(a2, b2, tf32);  // (batch..., N, M)
  }
  if (a_vec || b_vec) {
    // Drop the unit dims the 1-d operands gained: (..., 1, M) -> (..., M), (..., N, 1) -> (..., N).
    Shape sizes(out.sizes());
    if (a_vec) sizes.erase(sizes.end() - 2);
    if (b_vec) sizes.erase(sizes.end() - 1);
    out = ops::alias(out, sizes, contiguous_strides(sizes), out.storage_offset());
  }
  if (autograd::needs_grad({a, b})) {
    autograd::record(op, {a, b}, {out}, /*save=*/{a, b}, [tf32](autograd::BackwardContext& ctx) {
      return matmul_backward(ctx.grad(), ctx.saved[0], ctx.saved[1], ctx.needs(0), ctx.needs(1), tf32);
    });
  }
  return out;
}

// x (..., in) @ weight^T (in, out) + bias, with the bias written first and the GEMM adding onto
// it (CPU) or added by the GEMM's epilogue (CUDA), so there is no second pass over the output.
// Records no history.
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, bool tf32) {
  NoGradGuard no_grad;
  const DType dtype = x.dtype();
  if (x.is_cpu() && is_reduced_float(dtype)) {
    return linear_forward(x.to(kFloat32), weight.to(kFloat32), bias.defined() ? bias.to(kFloat32) : bias,
                          tf32)
        .to(dtype);
  }
  Shape out_sizes(x.sizes());
  out_sizes.back() = weight.size(0);
  Tensor x2 = flatten_rows(x);                                            // (rows, in)
  Tensor out = Tensor::empty({x2.size(0), weight.size(0)}, x.options());  // (rows, out)
  ops::dispatch(
      "linear", x,
      [&] {
        Tensor wt = weight.t();  // (in, out), a column-major view: no copy
        if (!ops::cpu::is_gemm_operand(x2)) x2 = x2.contiguous();
        if (!ops::cpu::is_gemm_operand(wt)) wt = wt.contiguous();
        if (bias.defined()) ops::cpu::copy(bias, out);  // every row starts as the bias
        ops::cpu::gemm(x2, wt, out, /*accumulate=*/bias.defined());
      },
      [&] {
        Tensor wt = weight.t();  // (in, out), a column-major view: no copy
        if (!ops::cuda::is_gemm_operand(x2)) x2 = x2.contiguous();
        if (!ops::cuda::is_gemm_operand(wt)) wt = wt.contiguous();
        ops::cuda::gemm(x2, wt, out, {.bias = bias, .allow_tf32 = tf32});
      });
  return ops::alias(out, out_sizes, contiguous_strides(out_sizes), out.storage_offset());
}

// The gradient of linear's weight w (out, in) from g (rows, out) and x (rows, in), g^T x, and
// with `with_bias` on CUDA (no create_graph) also the bias gradient, the row sums of g^T, from
// the product's epilogue instead of a reduction pass over g. An undefined bias gradient means
// the caller sums g. A column-major w (the transpose of an (in, out) parameter, as GPT-2's
// Conv1D passes) gets a column-major gradient: the transposed product costs the same and the
// parameter's gradient then needs no relayout (Note [Gradient layout]).
std::pair<Tensor, Tensor> weight_gradient(const Tensor& g, const Tensor& x, const Tensor& w, bool with_bias,
                                          bool tf32) {
  const bool column_major = w.size(0) > 1 && w.size(1) > 1 && w.stride(0) == 1 && w.stride(1) == w.size(0);
  const bool fused = with_bias && g.is_cuda() && !GradMode::is_enabled() && g.dtype() == x.dtype() &&
                     g.size(0) > 0 && is_floating(g.dtype());
  if (!fused) {
    return {column_major ? matmul_op("matmul", x.t(), g, tf32).t() : matmul_op("matmul", g.t(), x, tf32),
            Tensor()};
  }
  Tensor grad_b = Tensor::empty({g.size(1)}, g.options());
  bool summed = false;
  // column-major: (x^T g)^T, the bias the column sums of g; else g^T x, the bias the row sums of g^T.
  const Tensor a = column_major ? x.t() : g.t(), b = column_major ? g : x;
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, g.options());
  ops::dispatch(
      "linear", g, [] { NABLA_ASSERT(false, "weight_gradient: the fused path is CUDA only"); },
      [&] {
        const Tensor ae = ops::cuda::is_gemm_operand(a) ? a : a.contiguous();
        const Tensor be = ops::cuda::is_gemm_operand(b) ? b : b.contiguous();
        ops::cuda::GemmOptions o{.allow_tf32 = tf32};
        (column_major ? o.b_column_sums : o.a_row_sums) = grad_b;
        summed = ops::cuda::gemm(ae, be, out, o);
      });
  return {column_major ? out.t() : out, summed ? grad_b : Tensor()};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  return matmul_op("matmul", a, b, routes().matmul_tf32);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  ops::check_defined("mm", a, "a");
  ops::check_defined("mm", b, "b");
  NABLA_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-d matrices, got {} and {}", describe(a),
              describe(b));
  return matmul_op("mm", a, b, routes().matmul_tf32);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  ops::check_defined("bmm", a, "a");
  ops::check_defined("bmm", b, "b");
  NABLA_CHECK(a.dim() == 3 && b.dim() == 3,
              "bmm: expected 3-d batches of matrices (B, N, K) and (B, K, M), got {} and {}", describe(a),
              describe(b));
  NABLA_CHECK(a.size(0) == b.size(0),
              "bmm: batch sizes differ: {} and {} (bmm does not broadcast; use matmul)", describe(a),
              describe(b));
  return matmul_op("bmm", a, b, routes().matmul_tf32);
}

namespace {

void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  ops::check_same_device("linear", {x, weight, bias});
  check_floating_pair("linear", x, weight);
  NABLA_CHECK(weight.dim() == 2, "linear: expected a 2-d weight (out_features, in_features), got {}",
              describe(weight));
  NABLA_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1),
              "linear: input {} does not match weight {} (expected an input of shape (..., {}))", describe(x),
              describe(weight), weight.size(1));
  if (bias.defined()) {
    check_floating_pair("linear", x, bias);
    NABLA_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0),
                "linear: expected a bias of shape [{}] for weight {}, got {}", weight.size(0),
                describe(weight), describe(bias));
  }
}

// g @ w, the gradient of linear's input, plus `pending`, the gradient other nodes already sent to
// that input (autograd::take_pending_gradient; undefined: none). Where pending is a contiguous
// CUDA buffer of the result's shape and dtype that nothing else holds, the GEMM adds the product
// onto it (cuBLASLt's beta = 1): the q, k and v projections' gradients of the one input they
// share are summed without an elementwise pass each. Otherwise the two are added.
Tensor input_gradient_plus(const Tensor& g, const Tensor& w, const Shape& x_sizes, const Tensor& pending,
                           bool tf32) {
  if (pending.defined() && pending.is_cuda() && !GradMode::is_enabled() && pending.sizes() == x_sizes &&
      pending.dtype() == g.dtype() && g.dtype() == w.dtype() && g.device() == pending.device() &&
      pending.is_contiguous() && pending.impl_ptr().use_count() == 1 && pending.storage().use_count() == 1 &&
      g.numel() > 0 && is_floating(g.dtype())) {
    NoGradGuard no_grad;
    const Tensor g2 = flatten_rows(g);  // (rows, out)
    const Tensor out = ops::alias(pending, {g2.size(0), w.size(1)},
                                  contiguous_strides({g2.size(0), w.size(1)}), pending.storage_offset());
    const bool accumulated = ops::dispatch(
        "linear", g, [] { return false; },
        [&] {
          const Tensor a = ops::cuda::is_gemm_operand(g2) ? g2 : g2.contiguous();
          const Tensor b = ops::cuda::is_gemm_operand(w) ? w : w.contiguous();
          return ops::cuda::gemm(a, b, out, {.allow_tf32 = tf32, .accumulate = true});
        });
    if (accumulated) return pending;
  }
  Tensor grad_x = matmul_op("matmul", g, w, tf32);  // (..., out) @ (out, in)
  return pending.defined() ? grad_x + pending : grad_x;
}

// The gradients of x, weight and bias from g (..., out), the gradient of x @ w^T + b.
TensorList linear_gradients(const autograd::BackwardContext& ctx, const Tensor& g, const Tensor& x,
                            const Tensor& w, bool tf32) {
  Tensor grad_x, grad_w, grad_b;
  if (ctx.needs(0)) grad_x = input_gradient_plus(g, w, x.sizes(), autograd::take_pending_gradient(0), tf32);
  if (ctx.needs(1) || ctx.needs(2)) {
    Tensor g2 = flatten_rows(g);  // (rows, out)
    if (ctx.needs(1)) std::tie(grad_w, grad_b) = weight_gradient(g2, flatten_rows(x), w, ctx.needs(2), tf32);
    if (ctx.needs(2) && !grad_b.defined()) grad_b = g2.sum({0});
  }
  return TensorList{grad_x, grad_w, grad_b};
}

// gelu_tanh(x @ w^T + b) from cuBLASLt's GELU epilogue, or undefined where it does not apply. The
// backward takes the saved pre-activation through gelu_backward, then linear's gradients.
Tensor fused_linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!x.is_cuda() || !is_reduced_float(x.dtype()) || x.numel() == 0 || x.size(-1) == 0) return {};
  const bool grad = autograd::needs_grad({x, weight, bias});
  Shape out_sizes(x.sizes());
  out_sizes.back() = weight.size(0);
  Tensor out, pre;
  {
    NoGradGuard no_grad;
    Tensor x2 = flatten_rows(x);
    out = Tensor::empty({x2.size(0), weight.size(0)}, x.options());
    if (grad) pre = Tensor::empty(out.sizes(), x.options());
    const bool ran = ops::dispatch(
        "linear", x, [] { return false; },
        [&] {
          Tensor wt = weight.t();
          if (!ops::cuda::is_gemm_operand(x2)) x2 = x2.contiguous();
          if (!ops::cuda::is_gemm_operand(wt)) wt = wt.contiguous();
          return ops::cuda::gemm(x2, wt, out, {.bias = bias, .gelu = true, .gelu_input = pre});
        });
    if (!ran) return {};
    out = ops::alias(out, out_sizes, contiguous_strides(out_sizes), out.storage_offset());
    if (grad) pre = ops::alias(pre, out_sizes, contiguous_strides(out_sizes), pre.storage_offset());
  }
  if (grad) {
    autograd::record("LinearGeluBackward", {x, weight, bias}, {out}, /*save=*/{x, weight, pre},
                     [tf32 = routes().matmul_tf32](autograd::BackwardContext& ctx) {
                       // The saved pre-activation has no history, so a second derivative would
                       // miss gelu'' terms: refuse rather than drop them.
                       NABLA_CHECK(!GradMode::is_enabled(),
                                   "linear with a GELU activation: double backward through the fused "
                                   "epilogue is not supported; use gelu(linear(...)) for create_graph");
                       const Tensor g = gelu_backward(ctx.grad(), ctx.saved[2], {.tanh_approximation = true});
                       return linear_gradients(ctx, g, ctx.saved[0], ctx.saved[1], tf32);
                     });
  }
  return out;
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  ops::check_defined("linear", x_in, "x");
  ops::check_defined("linear", weight_in, "weight");
  // Autocast: lower precision.
  const auto [x, weight, bias] =
      ops::autocast(ops::AutocastCategory::LowerPrecision, {x_in, weight_in, bias_in});
  check_linear(x, weight, bias);
  const bool tf32 = routes().matmul_tf32;  // one snapshot for the forward and its backward
  Tensor out = linear_forward(x, weight, bias, tf32);
  if (autograd::needs_grad({x, weight, bias})) {
    autograd::record("linear", {x, weight, bias}, {out}, /*save=*/{x, weight},
                     [tf32](autograd::BackwardContext& ctx) {
                       return linear_gradients(ctx, ctx.grad(), ctx.saved[0], ctx.saved[1], tf32);
                     });
  }
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Activation activation) {
  if (activation == Activation::none) return linear(x_in, weight_in, bias_in);
  ops::check_defined("linear", x_in, "x");
  ops::check_defined("linear", weight_in, "weight");
  const auto [x, weight, bias] =
      ops::autocast(ops::AutocastCategory::LowerPrecision, {x_in, weight_in, bias_in});
  check_linear(x, weight, bias);
  if (Tensor out = fused_linear_gelu(x, weight, bias); out.defined()) return out;
  return gelu(linear(x, weight, bias), {.tanh_approximation = true});
}

}  // namespace nabla
