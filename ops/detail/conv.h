// Internal. The convolution family's backend seam (Note [Backend seams] in docs/design/routes.md):
// what a backend's 2-d convolution computes, declared once for every backend. The front ends
// (ops/conv.cpp) validate, choose the layout the backend runs in, allocate and record autograd;
// which implementation runs is the backend's choice (the CUDA route table is
// ops/cuda/conv/routes.cpp). The CPU backend is ops/cpu/conv.cpp.
//
// Tensors arrive dense in the backend's layout for the call (`layout`): x (N, C, H, W) or grad_x,
// w (O, C / groups, kH, kW) or grad_w, y (N, O, Ho, Wo) or grad_y, one floating dtype (the CPU
// takes float32 and float64; the front end computes 16-bit in float32 there); bias (O) or
// undefined. Outputs are overwritten.
#pragma once

#include <array>
#include <cstdint>

#include <utility>

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/routes.h"

namespace nabla::ops {

// The geometry of a 2-d convolution, (height, width) pairs, already validated.
struct ConvParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

struct Convolution {
  // The layout the backend computes activations of `format` and `dtype` in.
  MemoryFormat (*layout)(MemoryFormat format, DType dtype);
  // y = conv(x, w) + bias.
  void (*forward)(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const ConvParams& p,
                  const Routes& routes);
  // y = relu(conv(x, w) + bias [+ residual]) in one pass (bias defined, residual laid out as y or
  // undefined). False, having written nothing, where the backend has no such pass.
  bool (*forward_relu)(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                       const Tensor& y, const ConvParams& p, const Routes& routes);
  // grad_x = the gradient of conv(x, w) with respect to x.
  void (*backward_input)(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x, const ConvParams& p,
                         const Routes& routes);
  // grad_x += that gradient, where the backend can sum into grad_x as it computes; false, having
  // written nothing, elsewhere. Null where the backend never can.
  bool (*backward_input_accumulate)(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x,
                                    const ConvParams& p, const Routes& routes);
  // grad_w = the gradient with respect to w, summed over the batch.
  void (*backward_weight)(const Tensor& grad_y, const Tensor& x, const Tensor& grad_w, const ConvParams& p,
                          const Routes& routes);
};

namespace cpu {
extern const Convolution kConvolution;  // ops/cpu/conv.cpp
}
namespace cuda {
extern const Convolution kConvolution;  // ops/cuda/conv/routes.cpp (CUDA builds only)
}

// The convolution of `device`, for asking what it can do (untimed: backend_of in ops/detail/dispatch.h).
inline const Convolution& convolution_of(const Device& device) {
  return backend_of<cpu::kConvolution, cuda::kConvolution>("conv2d", device);
}

// Runs call(backend) with the convolution of `on`'s device, timed as `op`: the family's one
// dispatch (Note [One backend dispatch] in core/dispatch.h).
template <class Call>
decltype(auto) on_convolution(const char* op, const Tensor& on, Call&& call) {
  return on_backend<cpu::kConvolution, cuda::kConvolution>(op, on, std::forward<Call>(call));
}

}  // namespace nabla::ops
