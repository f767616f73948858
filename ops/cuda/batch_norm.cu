// nabla's own CUDA batch-norm kernels, for the calls cuDNN does not take (Note [cuDNN batch
// norm] in batch_norm_cudnn.cpp): every contiguous (NCHW) input, where they are faster than
// cuDNN's, bfloat16 eval, very large batches, and anything cuDNN refuses. So they are built for
// bandwidth, not only for correctness.
//
// x is read in place as `outer` blocks of (C, inner): inner = prod(*) for contiguous x, 1 for
// channels_last. Per-channel sums take two kernels: many blocks per channel write partial sums
// (so a 64-channel layer still fills the GPU), then one thread per channel adds a channel's
// partials in a fixed order (deterministic) and finishes the statistics. Contiguous x is read
// plane by plane with vector loads; channels_last x in tiles of 32 channels by rows, so a warp
// reads adjacent channels. The variance is one pass over x, shifted by the channel's first
// element (a sample of the channel, so the shifted mean is small and E[d^2] - E[d]^2 does not
// cancel even when the mean is far from zero). Elementwise kernels move 8/4/2 elements per load
// where the layout allows and find the channel once per vector. Float16/bfloat16 compute in
// float; the statistics are float (double for float64).
#include <algorithm>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/norm_kernels.h"
#include "nabla/ops/cuda/reduce_layout.h"

namespace nabla::ops::cuda {

namespace {

constexpr int kSumThreads = 256;
constexpr int kTileChannels = 32, kTileRows = 8;  // channels_last partial-sum blocks

struct ChannelBlocks {
  int64_t outer = 0, channels = 0, inner = 0;
  int64_t per_channel() const { return outer * inner; }
};

ChannelBlocks blocks_of(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
  if (x.is_contiguous()) return {n, c, spatial};
  NABLA_ASSERT(x.is_contiguous(MemoryFormat::ChannelsLast), "batch_norm kernel got {}", describe(x));
  return {n * spatial, c, 1};
}

// V elements of T in one load or store.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, acc_t<T> (&out)[V]) {
  const Vec<T, V> in = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = load_as_acc(in.v[j]);
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const acc_t<T> (&in)[V]) {
  Vec<T, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = store_from<T>(in[j]);
  *reinterpret_cast<Vec<T, V>*>(p) = out;
}

template <typename P>
P* ptr(const Tensor& t) {
  return t.defined() ? static_cast<P*>(t.data_ptr()) : nullptr;
}

bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The widest vector (up to 16 bytes) whose V consecutive elements share one channel (contiguous
// x: inner % V == 0) or are V consecutive channels (channels_last: C % V == 0), with every
// pointer aligned to it.
template <typename T>
int vector_width(const ChannelBlocks& b, std::initializer_list<const void*> ptrs) {
  for (int v = static_cast<int>(16 / sizeof(T)); v > 1; v /= 2) {
    if ((b.inner > 1 ? b.inner : b.channels) % v != 0) continue;
    if (std::all_of(ptrs.begin(), ptrs.end(),
                    [&](const void* p) { return !p || aligned_to(p, sizeof(T) * v); }))
      return v;
  }
  return 1;
}

// Calls fn.template operator()<V>() for the runtime width v (1, 2, 4 or 8, at most 16 bytes).
template <typename T, typename Fn>
void with_width(int v, Fn&& fn) {
  if constexpr (sizeof(T) <= 2) {
    if (v == 8) return fn.template operator()<8>();
  }
  if constexpr (sizeof(T) <= 4) {
    if (v == 4) return fn.template operator()<4>();
  }
  if constexpr (sizeof(T) <= 8) {
    if (v == 2) return fn.template operator()<2>();
  }
  fn.template operator()<1>();
}

// ---- per-channel sums ----------------------------------------------------------------------
//
// A Terms type says what two sums to take per channel: prepare(c) loads what the channel's
// terms share, add() accumulates V elements that belong to channel c (or, channels_last, one
// element of channel c).

template <typename T>
struct StatsTerms {  // shifted sums of x: sum(x - k), sum((x - k)^2), k = the channel's first x
  using A = acc_t<T>;
  const T* x;
  int64_t inner;
  __device__ A prepare(int64_t c) const { return load_as_acc(x[c * inner]); }
  template <int V>
  __device__ void add(int64_t off, A k, A& s0, A& s1) const {
    A v[V];
    load_vec<T, V>(x + off, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A d = v[j] - k;
      s0 += d;
      s1 += d * d;
    }
  }
};

// dy through a ReLU whose output was y (zero where y <= 0); dy itself without one.
template <typename T, int V>
__device__ __forceinline__ void load_grad(const T* dy, const T* relu_y, int64_t off, acc_t<T> (&g)[V]) {
  load_vec<T, V>(dy + off, g);
  if (!relu_y) return;
  acc_t<T> y[V];
  load_vec<T, V>(relu_y + off, y);
#pragma unroll
  for (int j = 0; j < V; ++j) g[j] = y[j] > acc_t<T>(0) ? g[j] : acc_t<T>(0);
}

template <typename T>
struct GradTerms {  // sum(g), sum(g * (x - mean)), g = dy, masked by the fused ReLU's output
  using A = acc_t<T>;
  const T* dy;
  const T* x;
  const T* relu_y;  // null: no ReLU
  const A* mean;
  __device__ A prepare(int64_t c) const { return mean[c]; }
  template <int V>
  __device__ void add(int64_t off, A m, A& s0, A& s1) const {
    A g[V], v[V];
    load_grad<T, V>(dy, relu_y, off, g);
    load_vec<T, V>(x + off, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      s0 += g[j];
      s1 += g[j] * (v[j] - m);
    }
  }
};

// Sums v[0..K) over the block; thread 0 gets the totals (in a fixed order).
template <int K, typename A>
__device__ void block_sum(A (&v)[K]) {
  __shared__ A partial[K][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int k = 0; k < K; ++k) {
    for (int mask = 16; mask > 0; mask /= 2) v[k] += __shfl_xor_sync(0xffffffffu, v[k], mask);
    if (lane == 0) partial[k][warp] = v[k];
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int k = 0; k < K; ++k) {
    A total = A(0);
    for (int w = 0; w < warps; ++w) total += partial[k][w];
    v[k] = total;
  }
}

// Contiguous x: block (c, split) sums units [split * chunk, +chunk) of channel c, a unit being
// V elements of one plane (inner % V == 0). partial is [splits][2][C].
template <typename T, int V, typename Terms>
__global__ void __launch_bounds__(kSumThreads)
    plane_sums_kernel(Terms terms, int64_t outer, int64_t channels, int64_t inner, int64_t chunk,
                      acc_t<T>* __restrict__ partial) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x, split = blockIdx.y;
  const int64_t row_units = inner / V, units = outer * row_units;
  const int64_t end = std::min(units, (split + 1) * chunk);
  const A pre = terms.prepare(c);
  A s[2] = {A(0), A(0)};
  int64_t u = split * chunk + threadIdx.x;
  // (n, i) of unit u, stepped without a division per unit.
  int64_t n = u / row_units, i = u % row_units;
  const int64_t step_n = blockDim.x / row_units, step_i = blockDim.x % row_units;
  for (; u < end; u += blockDim.x) {
    terms.template add<V>((n * channels + c) * inner + i * V, pre, s[0], s[1]);
    i += step_i;
    n += step_n;
    if (i >= row_units) {
      i -= row_units;
      ++n;
    }
  }
  block_sum(s);
  if (threadIdx.x != 0) return;
  partial[(split * 2) * channels + c] = s[0];
  partial[(split * 2 + 1) * channels + c] = s[1];
}

// channels_last x (rows of C): block (g, split) sums rows [split * chunk, +chunk) of channels
// [32 g, 32 g + 32), thread (tx, ty) taking channel 32 g + tx and every 8th row.
template <typename T, typename Terms>
__global__ void __launch_bounds__(kTileChannels* kTileRows)
    tile_sums_kernel(Terms terms, int64_t rows, int64_t channels, int64_t chunk,
                     acc_t<T>* __restrict__ partial) {
  using A = acc_t<T>;
  __shared__ A tile[2][kTileRows][kTileChannels + 1];
  const int64_t c = int64_t{blockIdx.x} * kTileChannels + threadIdx.x, split = blockIdx.y;
  const int64_t end = std::min(rows, (split + 1) * chunk);
  A s[2] = {A(0), A(0)};
  if (c < channels) {
    const A pre = terms.prepare(c);
    for (int64_t r = split * chunk + threadIdx.y; r < end; r += kTileRows)
      terms.template add<1>(r * channels + c, pre, s[0], s[1]);
  }
  tile[0][threadIdx.y][threadIdx.x] = s[0];
  tile[1][threadIdx.y][threadIdx.x] = s[1];
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  for (int k = 0; k < 2; ++k) {
    A total = A(0);
    for (int r = 0; r < kTileRows; ++r) total += tile[k][r][threadIdx.x];
    partial[(split * 2 + k) * channels + c] = total;
  }
}

// Launches the partial sums of `terms` over x's layout; returns the [splits][2][C] partials.
template <typename T, typename Terms>
Tensor channel_sums(const Terms& terms, const ChannelBlocks& b, int vec, const Tensor& like,
                    cudaStream_t stream, int64_t* splits_out) {
  using A = acc_t<T>;
  const int64_t target_blocks = 8 * int64_t{sm_count(like.device().index)};
  const int64_t groups = b.inner == 1 ? (b.channels + kTileChannels - 1) / kTileChannels : b.channels;
  const int64_t units = b.inner == 1 ? b.outer : b.outer * (b.inner / vec);
  // Enough blocks to fill the GPU, each with at least 8192 elements to sum.
  const int64_t min_units = b.inner == 1 ? 256 : 8192 / vec;
  int64_t splits = std::min((target_blocks + groups - 1) / groups, (units + min_units - 1) / min_units);
  splits = std::clamp<int64_t>(splits, 1, 65535);
  const int64_t chunk = std::max<int64_t>((units + splits - 1) / splits, 1);
  splits = std::max<int64_t>((units + chunk - 1) / chunk, 1);
  Tensor partial = Tensor::empty({splits * 2 * b.channels}, like.options());
  auto* out = static_cast<A*>(partial.data_ptr());
  if (b.inner == 1) {
    tile_sums_kernel<T>
        <<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(splits)), dim3(kTileChannels, kTileRows),
           0, stream>>>(terms, b.outer, b.channels, chunk, out);
  } else {
    with_width<T>(vec, [&]<int V>() {
      plane_sums_kernel<T, V><<<dim3(static_cast<unsigned>(b.channels), static_cast<unsigned>(splits)),
                                kSumThreads, 0, stream>>>(terms, b.outer, b.channels, b.inner, chunk, out);
    });
  }
  NABLA_CUDA_CHECK_LAUNCH();
  *splits_out = splits;
  return partial;
}

// The two sums of channel c over all splits, in split order.
template <typename A>
__device__ void total_of(const A* __restrict__ partial, int64_t splits, int64_t channels, int64_t c, A& s0,
                         A& s1) {
  s0 = A(0);
  s1 = A(0);
  for (int64_t s = 0; s < splits; ++s) {
    s0 += partial[(s * 2) * channels + c];
    s1 += partial[(s * 2 + 1) * channels + c];
  }
}

template <typename T>
__global__ void stats_finalize_kernel(const acc_t<T>* __restrict__ partial, int64_t splits,
                                      const T* __restrict__ x, int64_t channels, int64_t inner, int64_t count,
                                      double eps, double momentum, acc_t<T>* save_mean, acc_t<T>* save_invstd,
                                      acc_t<T>* running_mean, acc_t<T>* running_var) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  A s0, s1;
  total_of(partial, splits, channels, c, s0, s1);
  const A n = static_cast<A>(count);
  const A shifted_mean = s0 / n;
  A var = s1 / n - shifted_mean * shifted_mean;
  var = var > A(0) ? var : A(0);
  const A mean = load_as_acc(x[c * inner]) + shifted_mean;
  save_mean[c] = mean;
  save_invstd[c] = A(1) / sqrt(var + static_cast<A>(eps));
  if (running_mean) {
    const A m = static_cast<A>(momentum);
    running_mean[c] = (A(1) - m) * running_mean[c] + m * mean;
    running_var[c] = (A(1) - m) * running_var[c] + m * var * n / (n - A(1));
  }
}

// sums[c] = sum(dy), sums[C + c] = sum(dy * (x - mean)); the weight and bias gradients follow.
template <typename A>
__global__ void grad_finalize_kernel(const A* __restrict__ partial, int64_t splits, int64_t channels,
                                     const A* __restrict__ invstd, A* __restrict__ sums, A* dweight,
                                     A* dbias) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  A s0, s1;
  total_of(partial, splits, channels, c, s0, s1);
  sums[c] = s0;
  sums[channels + c] = s1;
  if (dweight) dweight[c] = s1 * invstd[c];
  if (dbias) dbias[c] = s0;
}

unsigned channel_blocks(int64_t channels) {
  return static_cast<unsigned>((channels + kBlockSize - 1) / kBlockSize);
}

// ---- elementwise -----------------------------------------------------------------------------

// The channel of element e0 and the step between the channels of its vector's elements: the
// same channel for contiguous x, consecutive channels for channels_last.
__device__ __forceinline__ int64_t channel_of(int64_t e0, int64_t channels, int64_t inner) {
  return inner == 1 ? e0 % channels : (e0 / inner) % channels;
}

// y = (x - mean[c]) * invstd[c] * w[c] + b[c]; with `from_var`, `scale` holds variances. The
// fused variants add z and/or apply a ReLU to that.
template <typename T, int V>
__global__ void normalize_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t numel, int64_t channels,
                                 int64_t inner, const acc_t<T>* __restrict__ mean,
                                 const acc_t<T>* __restrict__ scale, bool from_var, double eps,
                                 const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                                 const T* __restrict__ z, bool relu) {
  using A = acc_t<T>;
  const int64_t step = inner == 1 ? 1 : 0;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < numel / V;
       g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c0 = channel_of(g * V, channels, inner);
    A v[V];
    load_vec<T, V>(x + g * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t c = c0 + j * step;
      A k = from_var ? A(1) / sqrt(scale[c] + static_cast<A>(eps)) : scale[c];
      if (w) k *= w[c];
      v[j] = (v[j] - mean[c]) * k + (b ? b[c] : A(0));
    }
    if (z) {
      A zv[V];
      load_vec<T, V>(z + g * V, zv);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] += zv[j];
    }
    if (relu) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = v[j] > A(0) ? v[j] : A(0);
    }
    store_vec<T, V>(y + g * V, v);
  }
}

// dx = w * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean))), g = dy masked
// by the fused ReLU's output y when there is one; dz = g for the fused add. dx or dz may be dy
// itself (ops/norm.cpp, fused_backward): each thread reads its elements before it writes them.
template <typename T, int V>
__global__ void grad_input_kernel(const T* dy, const T* __restrict__ x, T* dx, int64_t numel,
                                  int64_t channels, int64_t inner, int64_t per_channel,
                                  const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ invstd,
                                  const acc_t<T>* __restrict__ sums, const acc_t<T>* __restrict__ w,
                                  const T* __restrict__ relu_y, T* dz) {
  using A = acc_t<T>;
  const A count = static_cast<A>(per_channel);
  const int64_t step = inner == 1 ? 1 : 0;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < numel / V;
       g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c0 = channel_of(g * V, channels, inner);
    A gv[V], xv[V];
    load_grad<T, V>(dy, relu_y, g * V, gv);
    load_vec<T, V>(x + g * V, xv);
    if (dz) store_vec<T, V>(dz + g * V, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t c = c0 + j * step;
      const A is = invstd[c];
      const A proj = sums[channels + c] / count * is * is;
      const A grad = gv[j] - sums[c] / count - (xv[j] - mean[c]) * proj;
      gv[j] = grad * is * (w ? w[c] : A(1));
    }
    store_vec<T, V>(dx + g * V, gv);
  }
}

}  // namespace

void batch_norm_forward_kernel(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                               double momentum, double eps, const Tensor& z, bool relu) {
  const ChannelBlocks b = blocks_of(in.x);
  if (b.channels == 0) return;
  const cudaStream_t stream = stream_for(in.x);
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    const auto* zp = ptr<const T>(z);
    const int vec = vector_width<T>(b, {x, yp, zp});
    int64_t splits = 0;
    const Tensor partial = channel_sums<T>(StatsTerms<T>{x, b.inner}, b, vec, stats.mean, stream, &splits);
    stats_finalize_kernel<T><<<channel_blocks(b.channels), kBlockSize, 0, stream>>>(
        ptr<A>(partial), splits, x, b.channels, b.inner, b.per_channel(), eps, momentum, ptr<A>(stats.mean),
        ptr<A>(stats.invstd), ptr<A>(in.running_mean), ptr<A>(in.running_var));
    NABLA_CUDA_CHECK_LAUNCH();
    const int64_t numel = in.x.numel();
    with_width<T>(vec, [&]<int V>() {
      normalize_kernel<T, V><<<blocks_for(numel / V, 4), kBlockSize, 0, stream>>>(
          x, yp, numel, b.channels, b.inner, ptr<A>(stats.mean), ptr<A>(stats.invstd), false, eps,
          ptr<A>(in.weight), ptr<A>(in.bias), zp, relu);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_inference_kernel(const BatchNormInputs& in, const Tensor& y, double eps) {
  const int64_t numel = in.x.numel();
  if (numel == 0) return;
  const ChannelBlocks b = blocks_of(in.x);
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    with_width<T>(vector_width<T>(b, {x, yp}), [&]<int V>() {
      normalize_kernel<T, V><<<blocks_for(numel / V, 4), kBlockSize, 0, stream_for(in.x)>>>(
          x, yp, numel, b.channels, b.inner, ptr<A>(in.running_mean), ptr<A>(in.running_var), true, eps,
          ptr<A>(in.weight), ptr<A>(in.bias), nullptr, false);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const BatchNormStats& stats, const BatchNormGrads& grads,
                                const Tensor& relu_y) {
  const ChannelBlocks b = blocks_of(x);
  if (b.channels == 0) return;
  const cudaStream_t stream = stream_for(x);
  Tensor sums = Tensor::empty({2 * b.channels}, stats.mean.options());
  dispatch_device<TypeSet::Floating>(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* xp = static_cast<const T*>(x.data_ptr());
    const auto* dyp = static_cast<const T*>(dy.data_ptr());
    auto* dxp = ptr<T>(grads.dx);
    auto* dzp = ptr<T>(grads.dresidual);
    const auto* yp = ptr<const T>(relu_y);
    const int vec = vector_width<T>(b, {xp, dyp, dxp, dzp, yp});
    int64_t splits = 0;
    const Tensor partial =
        channel_sums<T>(GradTerms<T>{dyp, xp, yp, ptr<A>(stats.mean)}, b, vec, stats.mean, stream, &splits);
    grad_finalize_kernel<A><<<channel_blocks(b.channels), kBlockSize, 0, stream>>>(
        ptr<A>(partial), splits, b.channels, ptr<A>(stats.invstd), ptr<A>(sums), ptr<A>(grads.dweight),
        ptr<A>(grads.dbias));
    NABLA_CUDA_CHECK_LAUNCH();
    NABLA_ASSERT(dxp || !dzp, "batch_norm_backward_kernel: dresidual without dx");
    if (!dxp) return;
    const int64_t numel = x.numel();
    with_width<T>(vec, [&]<int V>() {
      grad_input_kernel<T, V><<<blocks_for(numel / V, 4), kBlockSize, 0, stream>>>(
          dyp, xp, dxp, numel, b.channels, b.inner, b.per_channel(), ptr<A>(stats.mean), ptr<A>(stats.invstd),
          ptr<A>(sums), ptr<A>(weight), yp, dzp);
    });
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
