// Public header. 2-d convolution (cross-correlation, as in PyTorch): im2col + Eigen GEMM on the
// CPU, cuDNN on CUDA.
//
//   Tensor y = nabla::conv2d(x, w);                                      // stride 1, no padding
//   Tensor y = nabla::conv2d(x, w, b, {.stride = 2, .padding = 1});      // one value for H and W
//   Tensor y = nabla::conv2d(x, w, {}, {.padding = {1, 2}, .groups = 4});  // (H, W) pairs
//
// x (N, C, H, W), weight (O, C / groups, kH, kW), bias (O) or undefined; the output is
// (N, O, Ho, Wo) with Ho = (H + 2 pH - dH (kH - 1) - 1) / sH + 1 (likewise Wo). A channels_last
// input gives a channels_last output. Float16/bfloat16 accumulate in float32 (on the CPU they
// compute in float32 and round once).
//
// Which cuDNN algorithms run (benchmark search, determinism, TF32) is set with a RoutesGuard
// (ops/routes.h), as PyTorch's torch.backends.cudnn flags.
#pragma once

#include <array>
#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla {

// A (height, width) pair that also accepts one value for both: `.stride = 2` or `.stride = {2, 1}`.
struct Pair2 {
  constexpr Pair2(int64_t both) : values{both, both} {}  // NOLINT(google-explicit-constructor)
  constexpr Pair2(int64_t height, int64_t width) : values{height, width} {}
  constexpr int64_t operator[](size_t i) const { return values[i]; }
  std::array<int64_t, 2> values;
};

struct Conv2dOptions {
  Pair2 stride{1};
  Pair2 padding{0};  // zeros added on both sides
  Pair2 dilation{1};
  int64_t groups = 1;  // C and O split into this many independent convolutions
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions options = {});

// Transposed convolution (PyTorch's conv_transpose2d, the upsampling of decoders and GANs): the
// gradient of conv2d with respect to its input, run forward. x (N, in, H, W), weight (in,
// out / groups, kH, kW), bias (out) or undefined -> (N, out, Ho, Wo) with
// Ho = (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1 (likewise Wo).
// output_padding (< stride, per dim; PyTorch also allows < dilation) picks among the output sizes
// a strided convolution maps to one input size. On CUDA it is cuDNN's data-gradient convolution.
struct ConvTranspose2dOptions {
  Pair2 stride{1};
  Pair2 padding{0};
  Pair2 output_padding{0};
  Pair2 dilation{1};
  int64_t groups = 1;
};
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                        ConvTranspose2dOptions options = {});

// 1-d convolution (audio, time series): x (N, C, L) or unbatched (C, L), weight (O, C / groups,
// K), bias (O) or undefined -> (N, O, Lo), Lo = (L + 2 padding - dilation (K - 1) - 1) / stride
// + 1. It is conv2d over a height of 1, so it runs on the same kernels (cuDNN on CUDA).
struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;  // zeros added on both sides
  int64_t dilation = 1;
  int64_t groups = 1;
};
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv1dOptions options = {});

// relu(conv2d(x, weight, bias) [+ residual]): a convolution whose batch norm was folded into it
// (nn::fold_batch_norm), with the ReLU and a residual block's sum. On CUDA, where nothing needs a
// gradient, it is one call (a cuBLASLt epilogue for 1x1 channels_last, cuDNN's fusion engines
// or cudnnConvolutionBiasActivationForward otherwise; ops/cuda/conv/conv.cpp), so the activation is
// written once; anywhere else (the CPU, autograd, float64, a combination cuDNN declines) it is
// the ops composed. The result matches the composition up to rounding (one float16 rounding of
// the sum instead of three).
struct ConvReluOptions {
  Tensor residual = {};  // added before the ReLU: the convolution's output shape
};
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const ConvReluOptions& epilogue = {}, Conv2dOptions options = {});

}  // namespace nabla
