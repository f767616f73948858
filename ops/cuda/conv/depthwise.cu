// The data gradient of stride-2 depthwise convolutions in channels_last, on a kernel of nabla's.
//
// Note [Depthwise convolutions]: MobileNet's and EfficientNet's depthwise convolutions run on
// cuDNN's graph-API engines (Note [Grouped convolutions on the graph API]), which beat PyTorch's
// at every shape but one kind: the data gradient of the stride-2 ones took about 4x its
// forward's time (112x112x96 at batch 256, nabla_bench_depthwise), where the bytes moved are the
// forward's. A kernel of nabla's takes that case. With stride 2 and padding k / 2, the input
// pixel (2a + r, 2b + q) receives from the output pixels a + (r + p - i) / 2 for the taps i of
// its parity only, so a thread owns a 2x2 block of input pixels for a vector of channels: it
// loads the 2x2 (3x3 for 5x5 kernels) output-gradient patch they share once, and every index and
// tap is known when it compiles. In NHWC a warp's lanes take adjacent channel vectors: whole
// cache lines. The weights of a block's channels sit in shared memory as (tap, channel).
//
// nabla_bench_depthwise times it against cuDNN and PyTorch on every depthwise shape of
// MobileNetV2 and EfficientNet-B0.
#include <algorithm>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/conv/kernels.h"
#include "nabla/ops/cuda/reduce/layout.h"

namespace nabla::ops::cuda {

namespace {

// The sizes the data gradient needs: grad_x (N, in_h, in_w, C) and grad_y (N, out_h, out_w, C).
struct Geometry {
  int c;
  int in_h, in_w, out_h, out_w;
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[V]) {
  const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = static_cast<float>(load_as_opmath(pack.v[v]));
}

template <typename T, int V>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[V]) {
  Pack<T, V> pack;
#pragma unroll
  for (int v = 0; v < V; ++v) pack.v[v] = store_from<T>(in[v]);
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

// Copies the weights of channels [c0, c0 + tile) into shared memory as float (tap, channel); the
// last tile may be cut short by the channel count.
template <typename T>
__device__ void stage_weights(const T* w, float* shared, int c0, int tile, int channels, int taps) {
  const int threads = blockDim.x * blockDim.y;
  const int valid = min(tile, channels - c0);
  for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < valid * taps; i += threads) {
    const int c = i / taps, tap = i % taps;  // reads w (C, taps) in order
    shared[tap * tile + c] = static_cast<float>(load_as_opmath(w[(c0 + c) * taps + tap]));
  }
  __syncthreads();
}

// grad_x (N, H, W, C) of y = conv(x, w), stride 2, padding K / 2, from grad_y (N, Ho, Wo, C).
// Block: x over the channel vectors of a tile, y over 2x2 input blocks; grid: x over blocks, y
// over channel tiles. Indices are 32-bit (depthwise_conv2d_backward_input_supported).
template <typename T, int V, int K>
__global__ void depthwise_stride2_data_grad_kernel(const T* __restrict__ grad_y, const T* __restrict__ w,
                                                   T* __restrict__ grad_x, Geometry g, int blocks_h,
                                                   int blocks_w, int total_blocks) {
  constexpr int P = K / 2;
  // Output offsets from a (and b) that some tap of the block reaches: [kLow, 1].
  constexpr int kLow = -(P / 2);
  constexpr int R = 2 - kLow;
  extern __shared__ float weights[];
  const int tile = blockDim.x * V;
  const int c0 = blockIdx.y * tile;
  stage_weights(w, weights, c0, tile, g.c, K * K);
  const int lc = threadIdx.x * V;
  const int c = c0 + lc;
  if (c >= g.c) return;
  for (int blk = blockIdx.x * blockDim.y + threadIdx.y; blk < total_blocks; blk += gridDim.x * blockDim.y) {
    const int b = blk % blocks_w;
    const int a = (blk / blocks_w) % blocks_h;
    const int n = blk / (blocks_w * blocks_h);
    float patch[R][R][V];
#pragma unroll
    for (int u = 0; u < R; ++u) {
#pragma unroll
      for (int v = 0; v < R; ++v) {
        const int oh = a + kLow + u, ow = b + kLow + v;
        if (oh >= 0 && oh < g.out_h && ow >= 0 && ow < g.out_w) {
          load_pack<T, V>(grad_y + ((n * g.out_h + oh) * g.out_w + ow) * g.c + c, patch[u][v]);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) patch[u][v][e] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int ih = 2 * a + r;
      if (ih >= g.in_h) continue;
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int iw = 2 * b + q;
        if (iw >= g.in_w) continue;
        float acc[V] = {};
#pragma unroll
        for (int i = 0; i < K; ++i) {
          if ((r + P - i) % 2 != 0) continue;  // constant once unrolled
#pragma unroll
          for (int j = 0; j < K; ++j) {
            if ((q + P - j) % 2 != 0) continue;
            const float* wt = weights + (i * K + j) * tile + lc;
            const auto& gy = patch[(r + P - i) / 2 - kLow][(q + P - j) / 2 - kLow];
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] = fmaf(gy[e], wt[e], acc[e]);
          }
        }
        store_pack<T, V>(grad_x + ((n * g.in_h + ih) * g.in_w + iw) * g.c + c, acc);
      }
    }
  }
}

Geometry make_geometry(const Tensor& grad_x, const Tensor& grad_y) {
  return {.c = static_cast<int>(grad_x.size(1)),
          .in_h = static_cast<int>(grad_x.size(2)),
          .in_w = static_cast<int>(grad_x.size(3)),
          .out_h = static_cast<int>(grad_y.size(2)),
          .out_w = static_cast<int>(grad_y.size(3))};
}

// The widest vector of V channels that divides C and every base pointer's alignment.
template <typename T>
int vector_width(int c, std::initializer_list<const void*> pointers, int widest) {
  for (int v = widest; v > 1; v /= 2) {
    bool ok = c % v == 0;
    for (const void* p : pointers) ok = ok && reinterpret_cast<uintptr_t>(p) % (sizeof(T) * v) == 0;
    if (ok) return v;
  }
  return 1;
}

// Calls fn.template operator()<V>() for the runtime width v (1, 2, 4 or 8).
template <typename Fn>
void with_width(int v, Fn&& fn) {
  switch (v) {
    case 8:
      return fn.template operator()<8>();
    case 4:
      return fn.template operator()<4>();
    case 2:
      return fn.template operator()<2>();
    default:
      return fn.template operator()<1>();
  }
}

}  // namespace

bool depthwise_conv2d_backward_input_supported(const Tensor& grad_x, const Tensor& w, const Tensor& grad_y,
                                               const ConvParams& p) {
  const int64_t c = grad_x.size(1), k = w.size(2);
  if (grad_x.dtype() == kFloat64 || c == 1 || p.groups != c || w.size(0) != c || w.size(1) != 1) return false;
  if ((k != 3 && k != 5) || w.size(3) != k || p.stride != std::array<int64_t, 2>{2, 2} ||
      p.padding != std::array<int64_t, 2>{k / 2, k / 2} || p.dilation != std::array<int64_t, 2>{1, 1})
    return false;
  // NHWC in memory (the NCHW case stays on cuDNN), the weight dense ((C, k, k) in either format),
  // and 32-bit indices.
  return grad_x.is_contiguous(MemoryFormat::ChannelsLast) &&
         grad_y.is_contiguous(MemoryFormat::ChannelsLast) &&
         (w.is_contiguous() || w.is_contiguous(MemoryFormat::ChannelsLast)) &&
         grad_x.numel() < (int64_t{1} << 31) && grad_y.numel() < (int64_t{1} << 31);
}

void depthwise_conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x,
                                     const ConvParams& p) {
  NABLA_ASSERT(depthwise_conv2d_backward_input_supported(grad_x, w, grad_y, p),
               "depthwise_conv2d_backward_input: unsupported problem {} {} {}", describe(grad_x), describe(w),
               describe(grad_y));
  const Geometry g = make_geometry(grad_x, grad_y);
  const int blocks_h = (g.in_h + 1) / 2, blocks_w = (g.in_w + 1) / 2;
  const int total = static_cast<int>(grad_x.size(0)) * blocks_h * blocks_w;
  const int k = static_cast<int>(w.size(2));
  const cudaStream_t stream = stream_for(grad_x);
  dispatch_device<TypeSet::Floating>(grad_x.dtype(), "depthwise_conv2d_backward_input", [&]<typename T>() {
    if constexpr (!std::is_same_v<T, double>) {
      const int v = vector_width<T>(g.c, {grad_x.data_ptr(), grad_y.data_ptr()}, sizeof(T) == 2 ? 8 : 4);
      with_width(v, [&]<int V>() {
        // x: the channel vectors of a tile (at most 32, a warp's worth of cache lines); y: 2x2
        // blocks, to 256 threads.
        const dim3 block(static_cast<unsigned>(std::clamp(g.c / V, 1, 32)),
                         static_cast<unsigned>(std::max(1, 256 / std::clamp(g.c / V, 1, 32))));
        const int tile = static_cast<int>(block.x) * V;
        const auto tiles = static_cast<unsigned>((g.c + tile - 1) / tile);
        const int64_t wanted = (total + block.y - 1) / block.y;
        const int64_t cap = std::max<int64_t>(int64_t{32} * sm_count(grad_x.device().index) / tiles, 1);
        const auto grid = static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, cap));
        const size_t shared = sizeof(float) * tile * k * k;
        const auto launch = [&](auto kernel) {
          kernel<<<dim3(grid, tiles), block, shared, stream>>>(
              static_cast<const T*>(grad_y.data_ptr()), static_cast<const T*>(w.data_ptr()),
              static_cast<T*>(grad_x.data_ptr()), g, blocks_h, blocks_w, total);
        };
        if (k == 3) {
          launch(depthwise_stride2_data_grad_kernel<T, V, 3>);
        } else {
          launch(depthwise_stride2_data_grad_kernel<T, V, 5>);
        }
        NABLA_CUDA_CHECK_LAUNCH();
      });
    }
  });
}

}  // namespace nabla::ops::cuda
