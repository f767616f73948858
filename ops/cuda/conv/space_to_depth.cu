// Note [Strided convolutions of few channels as space-to-depth]
//
// cuDNN has no fast kernel for a stride-2 convolution of an image's few channels (ResNet's 7x7
// stem) in bfloat16: at batch 256 channels_last its forward took over 3x the float16 time and its
// weight gradient about 2x, on both of nabla's routes and PyTorch's. Padding the channels to 8
// did not help, and an explicit im2col GEMM was slower still, because its patch matrix is 7x the
// image (docs/performance-archive.md).
//
// A stride-2 convolution is a stride-1 one over the input folded by 2x2 space-to-depth. With
// xp the zero-padded input and k = 2a + b (b in {0, 1}):
//   y[i] = sum_k xp[2i + k] w[k] = sum_a sum_b X[i + a][b] w'[a][b],
//   X[m][b] = xp[2m + b],  w'[a][b] = w[2a + b] (zero where 2a + b >= kH).
// In two dimensions X holds each 2x2 patch's 4 C values as its channels, and w' is
// ceil(kH/2) x ceil(kW/2), stride 1, no padding. So the stem becomes a 4x4 convolution over
// 12 channels (zeroed up to 16 so tensor cores take it), an input only 1.4x the image's size.
// Every product of the original convolution appears once; the rest multiply by zero. (For an
// odd kernel, output i also meets xp[2i + kH] with a zero weight: an infinity there, which the
// unfolded convolution gives output i + 1 anyway, makes output i a NaN rather than finite.)
// The weight gradient is the folded convolution's, gathered back into w's shape (each w
// element is exactly one w' element).
//
// bfloat16 only. At batch 256 in bfloat16 the folded stem takes less than half the unfolded
// forward's time and about two thirds of its weight gradient's, and the graphed bfloat16
// ResNet-50 step is shorter for it. In float16 cuDNN's own kernel for 3 channels is faster (the
// folded one took about 1.4x its time, and the step grew), so float16 convolutions stay as they
// are (docs/performance-archive.md).
//
// The kernels only move elements, so they copy bits: 16-bit elements as uint16_t.
#include <algorithm>

#include "nabla/core/cuda/device_guard.h"
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/conv/kernels.h"

namespace nabla::ops::cuda {

namespace {

// The folded channel cs of a 2x2 patch: offset (g / 2, g % 2) in the patch, channel c.
struct Fold {
  int64_t channels;  // C, the original input's
  __device__ bool real(int64_t cs) const { return cs < 4 * channels; }
  __device__ int64_t dy(int64_t cs) const { return cs / channels / 2; }
  __device__ int64_t dx(int64_t cs) const { return cs / channels % 2; }
  __device__ int64_t channel(int64_t cs) const { return cs % channels; }
};

// One thread per folded pixel (n, m, q): its cs channels, 8 (16 bytes) per store. Rows and
// columns past `rows` and `cols` read as zeros: no output of the original convolution reads
// them (they meet zeros of w'), and an infinity there must not become a NaN.
template <typename U>
__global__ void fold_input_kernel(const U* __restrict__ x, U* __restrict__ out, int64_t pixels,
                                  int64_t height, int64_t width, int64_t rows, int64_t cols, Fold fold,
                                  int64_t out_h, int64_t out_w, int64_t out_c, int64_t pad_h, int64_t pad_w) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pixels;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t q = i % out_w, m = i / out_w % out_h, n = i / (out_w * out_h);
    U* dst = out + i * out_c;
    for (int64_t base = 0; base < out_c; base += 8) {
      alignas(16) U v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t cs = base + j;
        const int64_t h = 2 * m + fold.dy(cs) - pad_h, w = 2 * q + fold.dx(cs) - pad_w;
        const bool inside = fold.real(cs) && h >= 0 && h < rows && w >= 0 && w < cols;
        v[j] = inside ? x[((n * height + h) * width + w) * fold.channels + fold.channel(cs)] : U(0);
      }
#pragma unroll
      for (int k = 0; k < static_cast<int>(sizeof(v) / 16); ++k)
        reinterpret_cast<uint4*>(dst + base)[k] = reinterpret_cast<const uint4*>(v)[k];
    }
  }
}

struct Strides4 {
  int64_t s[4];
};

Strides4 strides_of(const Tensor& t) {
  return {{t.stride(0), t.stride(1), t.stride(2), t.stride(3)}};
}

// w' (O, kh, kw, cs) in memory, one thread per element, from w (O, C, kH, kW) at any strides.
template <typename U>
__global__ void fold_weight_kernel(const U* __restrict__ w, Strides4 ws, U* __restrict__ out, int64_t total,
                                   Fold fold, int64_t k_h, int64_t k_w, int64_t out_kh, int64_t out_kw,
                                   int64_t out_c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t cs = i % out_c, a_w = i / out_c % out_kw, a_h = i / (out_c * out_kw) % out_kh;
    const int64_t o = i / (out_c * out_kw * out_kh);
    const int64_t kh = 2 * a_h + fold.dy(cs), kw = 2 * a_w + fold.dx(cs);
    const bool real = fold.real(cs) && kh < k_h && kw < k_w;
    out[i] = real ? w[o * ws.s[0] + fold.channel(cs) * ws.s[1] + kh * ws.s[2] + kw * ws.s[3]] : U(0);
  }
}

// grad_w (O, C, kH, kW) at any strides, one thread per element, from the folded gradient.
template <typename U>
__global__ void unfold_weight_grad_kernel(const U* __restrict__ folded, U* __restrict__ grad_w, Strides4 gs,
                                          int64_t total, int64_t channels, int64_t k_h, int64_t k_w,
                                          int64_t folded_kh, int64_t folded_kw, int64_t folded_c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t kw = i % k_w, kh = i / k_w % k_h, c = i / (k_w * k_h) % channels,
                  o = i / (k_w * k_h * channels);
    const int64_t cs = ((kh % 2) * 2 + kw % 2) * channels + c;
    grad_w[o * gs.s[0] + c * gs.s[1] + kh * gs.s[2] + kw * gs.s[3]] =
        folded[((o * folded_kh + kh / 2) * folded_kw + kw / 2) * folded_c + cs];
  }
}

int64_t folded_channels(int64_t channels) {
  return (4 * channels + 7) / 8 * 8;
}

Tensor channels_last_like(const Tensor& t, const Shape& sizes) {
  return Tensor::empty(
      sizes, {.dtype = t.dtype(), .device = t.device(), .memory_format = MemoryFormat::ChannelsLast});
}

// The 16-bit kernels copy bits; float32 is not folded (takes_space_to_depth).
template <typename F>
void with_bits(const Tensor& t, F&& f) {
  NABLA_ASSERT(t.itemsize() == 2, "space-to-depth folds 16-bit tensors, got {}", describe(t));
  f.template operator()<uint16_t>();
}

}  // namespace

bool takes_space_to_depth(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p) {
  return x.dtype() == kBFloat16 && x.dim() == 4 && x.size(1) <= 4 && p.groups == 1 && p.stride[0] == 2 &&
         p.stride[1] == 2 && p.dilation[0] == 1 && p.dilation[1] == 1 && w.size(2) >= 2 && w.size(3) >= 2 &&
         x.is_contiguous(MemoryFormat::ChannelsLast) && !y.is_contiguous() && y.numel() > 0;
}

Tensor space_to_depth_input(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p) {
  nabla::cuda::DeviceGuard device(x.device().index);
  const int64_t kh = (w.size(2) + 1) / 2, kw = (w.size(3) + 1) / 2;
  Tensor out =
      channels_last_like(x, {x.size(0), folded_channels(x.size(1)), y.size(2) + kh - 1, y.size(3) + kw - 1});
  const int64_t pixels = out.size(0) * out.size(2) * out.size(3);
  // The last input row the convolution reads is 2 (Ho - 1) + kH - 1 - padding.
  const int64_t rows = std::min(x.size(2), 2 * (y.size(2) - 1) + w.size(2) - p.padding[0]);
  const int64_t cols = std::min(x.size(3), 2 * (y.size(3) - 1) + w.size(3) - p.padding[1]);
  with_bits(x, [&]<typename U>() {
    fold_input_kernel<U><<<blocks_for(pixels), kBlockSize, 0, stream_for(x)>>>(
        static_cast<const U*>(x.data_ptr()), static_cast<U*>(out.data_ptr()), pixels, x.size(2), x.size(3),
        rows, cols, Fold{x.size(1)}, out.size(2), out.size(3), out.size(1), p.padding[0], p.padding[1]);
  });
  NABLA_CUDA_CHECK_LAUNCH();
  return out;
}

Tensor space_to_depth_weight(const Tensor& w) {
  nabla::cuda::DeviceGuard device(w.device().index);
  Tensor out = channels_last_like(
      w, {w.size(0), folded_channels(w.size(1)), (w.size(2) + 1) / 2, (w.size(3) + 1) / 2});
  const int64_t total = out.numel();
  with_bits(w, [&]<typename U>() {
    fold_weight_kernel<U><<<blocks_for(total), kBlockSize, 0, stream_for(w)>>>(
        static_cast<const U*>(w.data_ptr()), strides_of(w), static_cast<U*>(out.data_ptr()), total,
        Fold{w.size(1)}, w.size(2), w.size(3), out.size(2), out.size(3), out.size(1));
  });
  NABLA_CUDA_CHECK_LAUNCH();
  return out;
}

void weight_grad_from_space_to_depth(const Tensor& folded, const Tensor& grad_w) {
  nabla::cuda::DeviceGuard device(grad_w.device().index);
  const int64_t total = grad_w.numel();
  with_bits(grad_w, [&]<typename U>() {
    unfold_weight_grad_kernel<U><<<blocks_for(total), kBlockSize, 0, stream_for(grad_w)>>>(
        static_cast<const U*>(folded.data_ptr()), static_cast<U*>(grad_w.data_ptr()), strides_of(grad_w),
        total, grad_w.size(1), grad_w.size(2), grad_w.size(3), folded.size(2), folded.size(3),
        folded.size(1));
  });
  NABLA_CUDA_CHECK_LAUNCH();
}

}  // namespace nabla::ops::cuda
