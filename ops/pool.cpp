// max_pool2d, avg_pool2d and adaptive_avg_pool2d front ends.
//
// The front end checks the options as PyTorch does, builds one PoolGeometry (pool_window.h) and
// hands dense tensors to the kernels: an NCHW-dense or NHWC-dense input is passed as it is, and
// anything else (a strided slice) is first copied into its suggested format. Outputs and input
// gradients take the input's format, so channels_last stays channels_last without a round trip.
//
// Each backward is itself an op with a derivative: the backward of max pooling is linear in
// the gradient, and its own gradient picks the incoming values at the saved indices; the
// backward of average pooling is the adjoint of the forward, whose gradient is the forward
// again. So create_graph works through pooling.
//
// max_pool2d saves uint8 window offsets for its backward where the window has at most 255 taps,
// and max_pool2d_with_indices int64 plane positions, the indices it returns (Note [Compact
// max-pool indices] in ops/detail/pool_window.h): for ResNet-50's stem pool at batch 256 the
// int64 indices were 411 MB written and read back up to 4 times, the uint8 ones 51 MB. The
// double backward, which gathers at plane positions, converts offsets first (plane_positions).
#include "nabla/ops/pool.h"

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/pool_kernels.h"
#include "nabla/ops/cuda/pool/kernels.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

using ops::PoolGeometry;
using ops::PoolKind;

const char* name_of(PoolKind kind) {
  switch (kind) {
    case PoolKind::Max:
      return "max_pool2d";
    case PoolKind::Avg:
      return "avg_pool2d";
    case PoolKind::AdaptiveAvg:
      return "adaptive_avg_pool2d";
  }
  return "pool2d";
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// PyTorch's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                    bool ceil_mode) {
  int64_t out =
      floor_div(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  // With ceil_mode the last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

void check_input(const char* op, const Tensor& x) {
  ops::check_defined(op, x, "self");
  NABLA_CHECK(x.dim() == 3 || x.dim() == 4, "{}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got {}",
              op, describe(x));
  NABLA_CHECK(x.is_floating_point(), "{}: expected a floating-point input, got {}", op, describe(x));
  for (int64_t d = x.dim() - 3; d < x.dim(); ++d) {
    NABLA_CHECK(x.size(d) > 0, "{}: expected non-empty C, H and W dims, got {}", op, describe(x));
  }
}

// The geometry of max or average pooling of the 4-d x, with PyTorch's checks.
PoolGeometry window_geometry(PoolKind kind, const Tensor& x, PoolPair kernel, PoolPair stride,
                             PoolPair padding, PoolPair dilation, bool ceil_mode) {
  const char* op = name_of(kind);
  if (stride.h == 0 && stride.w == 0) stride = kernel;
  NABLA_CHECK(kernel.h > 0 && kernel.w > 0, "{}: expected a positive kernel size, got {}x{}", op, kernel.h,
              kernel.w);
  NABLA_CHECK(stride.h > 0 && stride.w > 0, "{}: expected a positive stride, got {}x{}", op, stride.h,
              stride.w);
  NABLA_CHECK(dilation.h > 0 && dilation.w > 0, "{}: expected a positive dilation, got {}x{}", op, dilation.h,
              dilation.w);
  NABLA_CHECK(padding.h >= 0 && padding.w >= 0, "{}: expected a non-negative padding, got {}x{}", op,
              padding.h, padding.w);
  NABLA_CHECK(padding.h <= kernel.h / 2 && padding.w <= kernel.w / 2,
              "{}: padding {}x{} must be at most half the kernel size {}x{} (as in PyTorch)", op, padding.h,
              padding.w, kernel.h, kernel.w);
  PoolGeometry g{.kind = kind,
                 .n = x.size(0),
                 .c = x.size(1),
                 .h = x.size(2),
                 .w = x.size(3),
                 .kernel_h = kernel.h,
                 .kernel_w = kernel.w,
                 .stride_h = stride.h,
                 .stride_w = stride.w,
                 .pad_h = padding.h,
                 .pad_w = padding.w,
                 .dilation_h = dilation.h,
                 .dilation_w = dilation.w};
  g.out_h = pooled_size(g.h, kernel.h, stride.h, padding.h, dilation.h, ceil_mode);
  g.out_w = pooled_size(g.w, kernel.w, stride.w, padding.w, dilation.w, ceil_mode);
  NABLA_CHECK(g.out_h > 0 && g.out_w > 0,
              "{}: input {} is too small for a {}x{} kernel (dilation {}x{}) with padding {}x{}: the output "
              "would be {}x{} (expected the dilated kernel to fit the padded input)",
              op, describe(x), kernel.h, kernel.w, dilation.h, dilation.w, padding.h, padding.w, g.out_h,
              g.out_w);
  return g;
}

Tensor pool_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g, MemoryFormat format);

// What max pooling's indices hold: the int64 plane positions max_pool2d_with_indices returns, or,
// when only the backward reads them, uint8 window offsets where they fit.
enum class MaxIndices { PlanePositions, Compact };

// Pools the 4-d x; returns the output and, for max pooling, the indices.
std::pair<Tensor, Tensor> pool_forward(const Tensor& x, const PoolGeometry& g,
                                       MaxIndices max_indices = MaxIndices::PlanePositions) {
  const MemoryFormat format = x.suggest_memory_format();
  const Tensor in = x.detach().contiguous(format);
  const Shape out_sizes{g.n, g.c, g.out_h, g.out_w};
  Tensor out = Tensor::empty(out_sizes, {.dtype = x.dtype(), .device = x.device(), .memory_format = format});
  Tensor indices;
  if (g.kind == PoolKind::Max) {
    const bool offsets = max_indices == MaxIndices::Compact && ops::fits_window_offsets(g);
    indices = Tensor::empty(
        out_sizes, {.dtype = offsets ? kUInt8 : kInt64, .device = x.device(), .memory_format = format});
  }
  ops::dispatch(
      "max_pool2d", x,
      [&] {
        if (g.kind == PoolKind::Max) {
          ops::cpu::max_pool2d(in, g, out, indices);
        } else {
          ops::cpu::avg_pool2d(in, g, out);
        }
      },
      [&] {
        if (g.kind == PoolKind::Max) {
          ops::cuda::max_pool2d(in, g, out, indices);
        } else {
          ops::cuda::avg_pool2d(in, g, out);
        }
      });
  if (autograd::needs_grad({x})) {
    autograd::record(name_of(g.kind), {x}, {out}, /*save=*/{indices},
                     [g, format](autograd::BackwardContext& ctx) {
                       return TensorList{pool_backward(ctx.grad(), ctx.saved[0], g, format)};
                     });
  }
  return {out, indices};
}

// Max pooling's saved indices as int64 plane positions, which gather takes.
Tensor plane_positions(const Tensor& indices, const PoolGeometry& g) {
  if (indices.dtype() == kInt64) return indices;
  Tensor positions = Tensor::empty(
      indices.sizes(),
      {.dtype = kInt64, .device = indices.device(), .memory_format = indices.suggest_memory_format()});
  ops::dispatch(
      "max_pool2d_backward", indices, [&] { ops::cpu::max_pool2d_positions(indices, g, positions); },
      [&] { ops::cuda::max_pool2d_positions(indices, g, positions); });
  return positions;
}

// The input gradient of pooling `g` (indices only for max pooling), in `format`.
Tensor pool_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g, MemoryFormat format) {
  const Tensor gin = grad.detach().contiguous(format);
  Tensor grad_input = Tensor::empty(
      {g.n, g.c, g.h, g.w}, {.dtype = grad.dtype(), .device = grad.device(), .memory_format = format});
  ops::dispatch(
      "max_pool2d_backward", grad,
      [&] {
        if (g.kind == PoolKind::Max) {
          ops::cpu::max_pool2d_backward(gin, indices, g, grad_input);
        } else {
          ops::cpu::avg_pool2d_backward(gin, g, grad_input);
        }
      },
      [&] {
        if (g.kind == PoolKind::Max) {
          ops::cuda::max_pool2d_backward(gin, indices, g, grad_input);
        } else {
          ops::cuda::avg_pool2d_backward(gin, g, grad_input);
        }
      });
  if (autograd::needs_grad({grad})) {
    if (g.kind == PoolKind::Max) {
      // d(grad_input)/d(grad) routes each output's gradient to its argmax: the adjoint picks.
      autograd::record("max_pool2d_backward", {grad}, {grad_input}, /*save=*/{indices},
                       [g](autograd::BackwardContext& ctx) {
                         const Tensor positions = plane_positions(ctx.saved[0], g);
                         const Tensor picked = gather(ctx.grad().reshape({g.n, g.c, g.h * g.w}), 2,
                                                      positions.reshape({g.n, g.c, g.out_h * g.out_w}));
                         return TensorList{picked.reshape({g.n, g.c, g.out_h, g.out_w})};
                       });
    } else {
      autograd::record(
          "avg_pool2d_backward", {grad}, {grad_input}, /*save=*/{},
          [g](autograd::BackwardContext& ctx) { return TensorList{pool_forward(ctx.grad(), g).first}; });
    }
  }
  return grad_input;
}

// Runs `pool` on x as 4-d, adding and removing the batch dim of a 3-d input.
template <typename Pool>
std::pair<Tensor, Tensor> batched(const Tensor& x, Pool pool) {
  if (x.dim() == 4) return pool(x);
  auto [out, indices] = pool(x.unsqueeze(0));
  return {out.squeeze(0), indices.defined() ? indices.squeeze(0) : indices};
}

// Max pooling with indices in `max_indices`' format.
std::pair<Tensor, Tensor> max_pool(const Tensor& x, const MaxPool2dOptions& o, MaxIndices max_indices) {
  check_input("max_pool2d", x);
  return batched(x, [&](const Tensor& x4) {
    return pool_forward(
        x4, window_geometry(PoolKind::Max, x4, o.kernel, o.stride, o.padding, o.dilation, o.ceil_mode),
        max_indices);
  });
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const MaxPool2dOptions& options) {
  return max_pool(x, options, MaxIndices::PlanePositions);
}

Tensor max_pool2d(const Tensor& x, const MaxPool2dOptions& options) {
  return max_pool(x, options, MaxIndices::Compact).first;
}

Tensor avg_pool2d(const Tensor& x, const AvgPool2dOptions& o) {
  check_input("avg_pool2d", x);
  return batched(x,
                 [&](const Tensor& x4) {
                   PoolGeometry g =
                       window_geometry(PoolKind::Avg, x4, o.kernel, o.stride, o.padding, 1, o.ceil_mode);
                   g.count_include_pad = o.count_include_pad;
                   return pool_forward(x4, g);
                 })
      .first;
}

Tensor adaptive_avg_pool2d(const Tensor& x, PoolPair output_size) {
  check_input("adaptive_avg_pool2d", x);
  NABLA_CHECK(output_size.h > 0 && output_size.w > 0,
              "adaptive_avg_pool2d: expected a positive output size, got {}x{} for input {}", output_size.h,
              output_size.w, describe(x));
  return batched(x,
                 [&](const Tensor& x4) {
                   const PoolGeometry g{.kind = PoolKind::AdaptiveAvg,
                                        .n = x4.size(0),
                                        .c = x4.size(1),
                                        .h = x4.size(2),
                                        .w = x4.size(3),
                                        .out_h = output_size.h,
                                        .out_w = output_size.w};
                   return pool_forward(x4, g);
                 })
      .first;
}

}  // namespace nabla
