// Training batch norm over channels_last rows as one persistent kernel per direction.
//
// Note [Persistent batch norm]
// nabla's two-pass kernels (batch_norm.cu) read every activation twice from device memory: the
// sums pass, then the elementwise pass. In between, a small kernel adds each channel's partial
// sums, and every boundary drains and refills the GPU. cuDNN's NHWC kernels avoid most of that
// by keeping part of the data on chip, and they were faster (docs/performance.md, session 21).
// Here one cooperative launch does the whole batch norm. It uses as many blocks as fit at once,
// and each block owns a contiguous range of rows.
//  1. Each thread takes one V-channel vector of its block's rows and sums its terms (StatsTerms
//     forward, GradTerms backward: the same formulas as the two-pass kernels). It keeps what it
//     read: its first rows in registers (kForwardRegRows, kBackwardRegRows), the next ones in
//     shared memory, the rest not
//     at all. The backward keeps the masked gradient g and x.
//  2. Each block writes its per-channel partial sums. After a grid-wide barrier, one warp per
//     channel adds the partials in a fixed order (warp_total_of; deterministic) and finishes the channel
//     (finish_stats / finish_grads). After a second barrier, every thread reads its
//     coefficients.
//  3. The elementwise pass walks each thread's rows backwards: first the rows it did not keep,
//     newest first, so the first reads hit what the L2 cache (50 MB) still holds from pass 1;
//     then the rows in shared memory, then those in registers.
// With 132 blocks, registers and shared memory hold about 30 MB of the forward's x (about 14 MB
// each of the backward's g and x), and L2 may hold as much again: a small activation is read
// from device memory once, and a larger one's second read is cut by that much.
//
// Measured on an H200 (docs/performance.md, session 22), these kernels are not yet faster than the
// routes they would replace (then cuDNN's NHWC kernels in 16-bit; since session 23 the two-pass
// kernels, faster still), so they are off by default (set_persistent_batch_norm, and
// nabla::set_batch_norm_persistent). Weighted over ResNet-50's BN + ReLU layers at batch 256
// (nabla_bench_batch_norm): float16 forward 5.65 ms against cuDNN's 5.64 and backward (mask from x)
// 7.88 against 7.77; bfloat16's backward 12.3 ms against cuDNN's 8.0; float32 level with the
// two-pass kernels in the forward and 4-5% slower in the backward. They win only on short activations
// (14x14 and 7x7: 161 against 217 us for float16's backward at 1024 channels), and whole graphed
// steps did not move. A thread's 4 channels of 8 bytes (16-bit) leave the loops bound by
// instructions rather than by bandwidth; 8 channels ran out of registers. Left to try: 16-byte
// vectors with the backward's coefficients folded to three per channel, pointer steps instead of
// 64-bit offsets per row, and cp.async for the rows kept in shared memory (bytes in flight without
// registers).
//
// The blocks must all be resident for the barriers, which the cooperative launch guarantees. A
// launch that does not fit fails with a CUDA error rather than hanging. A thread takes 4
// channels (16 bytes of float32, 8 of float16/bfloat16): channels_last rows of C a multiple of
// 4, up to 2048, run here; everything else takes the two-pass kernels.
#include <cooperative_groups.h>

#include <atomic>
#include <type_traits>

#include "nabla/core/cuda/check.h"
#include "nabla/ops/cuda/batch_norm_finish.cuh"
#include "nabla/ops/cuda/batch_norm_sums.cuh"
#include "nabla/ops/cuda/batch_norm_vectors.cuh"
#include "nabla/ops/cuda/norm_kernels.h"
#include "nabla/ops/cuda/reduce_layout.h"

namespace nabla::ops::cuda {

namespace {

using namespace batch_norm_detail;
namespace cg = cooperative_groups;

constexpr int kThreads = 512;                  // one block per SM, 16 warps
constexpr int kSharedCacheBytes = 192 * 1024;  // of the H200's 227 KB per block
// Channels per thread: 4, in every dtype. Each needs its own sums and coefficients in registers
// (up to 5 per channel in the backward), and 8 channels of a 16-byte 16-bit vector left too few
// registers for the rows kept and in flight: the kernels spilled.
constexpr int kV = 4;
template <typename T>
constexpr int kVecBytes = sizeof(T) * kV;
// Per thread, in bytes of one tensor: rows kept in registers, and streamed rows whose loads go
// out together (enough bytes in flight for the bandwidth with 16 warps per SM). Within 128
// registers a thread, without spills.
template <typename T>
constexpr int kForwardRegRows = 64 / kVecBytes<T>;
template <typename T>
constexpr int kBackwardRegRows = 16 / kVecBytes<T>;
template <typename T>
constexpr int kInFlight = 4;

std::atomic<bool> persistent_on{false};  // off by default: see the Note

// Rows up to which the switched-on routes take the persistent kernels (over the two-pass
// kernels, or cuDNN's NHWC kernels in 16-bit with set_cudnn_batch_norm_training on): at
// ResNet-50's batch norms at batch 256 they were faster only at 14x14 and 7x7 (up to 50176
// rows; session 22, against cuDNN), and slower from 28x28 (200704 rows) up, where there is more
// to stream than to keep.
constexpr int64_t kPersistentMaxRows = 65536;

// The rows of the calling thread: first + i * step for i < count, all within its block's
// contiguous range. Thread t takes vector `col` of a row, t / cols rows down.
struct RowWalk {
  int64_t first = 0, step = 1, count = 0, col = 0;
  bool active = false;  // false: the block's last kThreads % cols threads, which take no rows
};

__device__ RowWalk row_walk(int64_t rows, int64_t cols) {
  RowWalk w;
  w.step = kThreads / cols;
  w.col = threadIdx.x % cols;
  const int64_t down = threadIdx.x / cols;
  w.active = down < w.step;
  const int64_t begin = rows * blockIdx.x / gridDim.x, end = rows * (blockIdx.x + 1) / gridDim.x;
  w.first = begin + down;
  w.count = w.active && w.first < end ? (end - w.first + w.step - 1) / w.step : 0;
  return w;
}

// Shared-memory rows a thread keeps when it keeps `tensors` vectors of T per row.
template <typename T>
constexpr int shared_rows(int tensors) {
  return kSharedCacheBytes / (tensors * kThreads * kVecBytes<T>);
}

// A kept vector in shared memory, moved as one 8- or 16-byte word (a Vec of 16-bit elements
// copied member by member took four shared-memory accesses).
template <typename T, int V>
using RawWord = std::conditional_t<sizeof(Vec<T, V>) == 16, uint4, uint2>;

template <typename T, int V>
__device__ void keep_row(Vec<T, V>* cache, int64_t slot, int tensor, int tensors, const Vec<T, V>& v) {
  static_assert(sizeof(Vec<T, V>) == 8 || sizeof(Vec<T, V>) == 16);
  *reinterpret_cast<RawWord<T, V>*>(&cache[(slot * tensors + tensor) * kThreads + threadIdx.x]) =
      *reinterpret_cast<const RawWord<T, V>*>(&v);
}

template <typename T, int V>
__device__ Vec<T, V> kept_row(const Vec<T, V>* cache, int64_t slot, int tensor, int tensors) {
  const RawWord<T, V> w =
      *reinterpret_cast<const RawWord<T, V>*>(&cache[(slot * tensors + tensor) * kThreads + threadIdx.x]);
  return *reinterpret_cast<const Vec<T, V>*>(&w);
}

// Adds each channel's sums over the block's threads (those sharing `col`, in row order) and
// writes them as the block's partials, [C][2][block] (partial_index), the layout warp_total_of reads. One
// barrier for all 2V sums of a thread: these run once per kernel, but on small activations a
// kernel is short, and a barrier per sum cost microseconds.
template <typename A, int V>
__device__ void write_block_partials(const RowWalk& w, int64_t channels, const A (&s0)[V], const A (&s1)[V],
                                     A* partial) {
  __shared__ A column[2 * V][kThreads];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    column[j][threadIdx.x] = s0[j];
    column[V + j][threadIdx.x] = s1[j];
  }
  __syncthreads();
  const int64_t cols = channels / V;
  for (int64_t o = threadIdx.x; o < 2 * channels; o += kThreads) {
    const int64_t k = o / channels, c = o % channels, col = c / V, j = c % V;
    A total = A(0);
    for (int64_t r = 0; r < w.step; ++r) total += column[k * V + j][r * cols + col];
    partial[partial_index(c, static_cast<int>(k), blockIdx.x, gridDim.x)] = total;
  }
}

// Calls finish(c, s0, s1) on lane 0 of one warp per channel, across the whole grid.
template <typename A, typename Finish>
__device__ void finish_channels(const A* partial, int64_t channels, Finish&& finish) {
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t c = int64_t{blockIdx.x} * (kThreads / 32) + threadIdx.x / 32; c < channels; c += warps) {
    A s0, s1;
    warp_total_of(partial, gridDim.x, c, s0, s1);
    if (threadIdx.x % 32 == 0) finish(c, s0, s1);
  }
}

// A thread's K coefficients, written in this kernel by other blocks (so through L2, as above).
template <typename A, int V, int K>
__device__ ChannelCoefs<A, V, K> coherent_coefs(const A* coef, int64_t channels, int64_t c0) {
  ChannelCoefs<A, V, K> k;
#pragma unroll
  for (int i = 0; i < K; ++i) {
#pragma unroll
    for (int j = 0; j < V; ++j) k.v[i][j] = __ldcg(coef + i * channels + c0 + j);
  }
  return k;
}

// ---- forward -------------------------------------------------------------------------------

template <typename T>
struct ForwardArgs {
  const T* x;
  const T* z;  // null: no residual
  T* y;
  int64_t rows, channels;
  bool relu;
  double eps, momentum;
  StatsOut<opmath_t<T>> out;
  opmath_t<T>* partial;  // [C][2][blocks]
};

template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 1) forward_kernel(ForwardArgs<T> a) {
  using A = opmath_t<T>;
  constexpr int R = kForwardRegRows<T>, S = shared_rows<T>(1), F = kInFlight<T>;
  extern __shared__ uint4 shared_raw[];
  auto* cache = reinterpret_cast<Vec<T, V>*>(shared_raw);
  const RowWalk w = row_walk(a.rows, a.channels / V);
  const int64_t c0 = w.col * V, n = w.count;
  const auto offset = [&](int64_t i) { return (w.first + i * w.step) * a.channels + c0; };
  const StatsTerms<T> terms{a.x, 1};
  using Loaded = typename StatsTerms<T>::template Loaded<V>;

  // 1. Sums, keeping what was read.
  A s0[V], s1[V], shift[V];
#pragma unroll
  for (int j = 0; j < V; ++j) s0[j] = s1[j] = shift[j] = A(0);
  if (w.active) {
#pragma unroll
    for (int j = 0; j < V; ++j) shift[j] = terms.prepare(c0 + j);
  }
  Loaded kept[R];
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (i < n) terms.template load<V>(offset(i), kept[i]);
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (i < n) terms.template accumulate<V>(offset(i), kept[i], shift, s0, s1);
  for (int64_t i = R; i < n; i += F) {
    Loaded l[F];
#pragma unroll
    for (int u = 0; u < F; ++u)
      if (i + u < n) terms.template load<V>(offset(i + u), l[u]);
#pragma unroll
    for (int u = 0; u < F; ++u) {
      if (i + u >= n) continue;
      if (i + u < R + S) keep_row(cache, i + u - R, 0, 1, l[u].x);
      terms.template accumulate<V>(offset(i + u), l[u], shift, s0, s1);
    }
  }

  // 2. The statistics of every channel.
  const cg::grid_group grid = cg::this_grid();
  write_block_partials<A, V>(w, a.channels, s0, s1, a.partial);
  grid.sync();
  finish_channels<A>(a.partial, a.channels, [&](int64_t c, A t0, A t1) {
    finish_stats(c, a.channels, t0, t1, load_as_opmath(a.x[c]), a.rows, a.eps, a.momentum, a.out);
  });
  grid.sync();
  if (!w.active) return;
  const auto k = coherent_coefs<A, V, kForwardCoefs>(a.out.coef, a.channels, c0);

  // 3. y, newest rows first.
  const auto write = [&](int64_t i, const Vec<T, V> xr, const Vec<T, V>& zr) {
    A v[V], zv[V];
    widen<T, V>(xr, v);
    if (a.z) widen<T, V>(zr, zv);
    normalize_values<A, V>(v, zv, a.z != nullptr, a.relu, k);
    store_vec<T, V>(a.y + offset(i), v);
  };
  const int64_t kept_end = std::min<int64_t>(n, R + S);
  for (int64_t i = n - 1; i >= kept_end; i -= F) {
    Vec<T, V> xr[F], zr[F];
#pragma unroll
    for (int u = 0; u < F; ++u) {
      if (i - u < kept_end) continue;
      xr[u] = load_raw<T, V>(a.x + offset(i - u));
      if (a.z) zr[u] = load_raw<T, V>(a.z + offset(i - u));
    }
#pragma unroll
    for (int u = 0; u < F; ++u)
      if (i - u >= kept_end) write(i - u, xr[u], zr[u]);
  }
  for (int64_t i = kept_end - 1; i >= R; i -= F) {
    Vec<T, V> zr[F];
#pragma unroll
    for (int u = 0; u < F; ++u)
      if (a.z && i - u >= R) zr[u] = load_raw<T, V>(a.z + offset(i - u));
#pragma unroll
    for (int u = 0; u < F; ++u)
      if (i - u >= R) write(i - u, kept_row(cache, i - u - R, 0, 1), zr[u]);
  }
  Vec<T, V> zr[R];
#pragma unroll
  for (int i = R - 1; i >= 0; --i)
    if (a.z && i < n) zr[i] = load_raw<T, V>(a.z + offset(i));
#pragma unroll
  for (int i = R - 1; i >= 0; --i)
    if (i < n) write(i, kept[i].x, zr[i]);
}

// ---- backward ------------------------------------------------------------------------------

template <typename T>
struct BackwardArgs {
  GradTerms<T> terms;  // dy, x, the mask (from y or from x) and where g is written (dz)
  T* dx;               // null: only the sums (and dz)
  int64_t rows, channels;
  GradOut<opmath_t<T>> out;
  opmath_t<T>* partial;
};

template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 1) backward_kernel(BackwardArgs<T> a) {
  using A = opmath_t<T>;
  constexpr int R = kBackwardRegRows<T>, S = shared_rows<T>(2), F = kInFlight<T>;
  constexpr int K = kBackwardCoefs;  // pass 3 masks again with `pre`, not the mask's coefficients
  extern __shared__ uint4 shared_raw[];
  auto* cache = reinterpret_cast<Vec<T, V>*>(shared_raw);
  const RowWalk w = row_walk(a.rows, a.channels / V);
  const int64_t c0 = w.col * V, n = w.count;
  const auto offset = [&](int64_t i) { return (w.first + i * w.step) * a.channels + c0; };
  const GradTerms<T>& terms = a.terms;
  using Loaded = typename GradTerms<T>::template Loaded<V>;
  using Pre = typename GradTerms<T>::Pre;

  // 1. Sums of g and g * (x - mean), keeping g (the masked dy) and x.
  A s0[V], s1[V];
  Pre pre[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    s0[j] = s1[j] = A(0);
    pre[j] = w.active ? terms.prepare(c0 + j) : Pre{};
  }
  // g and x of one row, as kept: g rounded to T is exact (it is dy or zero). (Selecting dy's own
  // bits instead measured slower: it keeps dy's registers alive.)
  const auto sum_row = [&](int64_t i, const Loaded& l, Vec<T, V>& g_kept, Vec<T, V>& x_kept) {
    A g[V], v[V];
    terms.template masked<V>(offset(i), l, pre, g, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      s0[j] += g[j];
      s1[j] += g[j] * (v[j] - pre[j].mean);
      g_kept.v[j] = store_from<T>(g[j]);
    }
    x_kept = l.x;
  };
  Vec<T, V> kept_g[R], kept_x[R];
  {
    Loaded l[R];
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (i < n) terms.template load<V>(offset(i), l[i]);
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (i < n) sum_row(i, l[i], kept_g[i], kept_x[i]);
  }
  for (int64_t i = R; i < n; i += F) {
    Loaded l[F];
#pragma unroll
    for (int u = 0; u < F; ++u)
      if (i + u < n) terms.template load<V>(offset(i + u), l[u]);
#pragma unroll
    for (int u = 0; u < F; ++u) {
      if (i + u >= n) continue;
      Vec<T, V> g, x;
      sum_row(i + u, l[u], g, x);
      if (i + u < R + S) {
        keep_row(cache, i + u - R, 0, 2, g);
        keep_row(cache, i + u - R, 1, 2, x);
      }
    }
  }

  // 2. The coefficients of every channel.
  const cg::grid_group grid = cg::this_grid();
  write_block_partials<A, V>(w, a.channels, s0, s1, a.partial);
  grid.sync();
  finish_channels<A>(a.partial, a.channels,
                     [&](int64_t c, A t0, A t1) { finish_grads(c, a.channels, t0, t1, a.rows, a.out); });
  if (!a.dx) return;
  grid.sync();
  if (!w.active) return;
  const auto k = coherent_coefs<A, V, K>(a.out.coef, a.channels, c0);

  // 3. dx, newest rows first. Rows not kept take g from dz where pass 1 wrote it, else from dy
  // and the mask again.
  const auto write = [&](int64_t i, const Vec<T, V> gr, const Vec<T, V> xr) {
    A g[V], v[V];
    widen<T, V>(gr, g);
    widen<T, V>(xr, v);
    grad_input_values<A, V>(g, v, k);
    store_vec<T, V>(a.dx + offset(i), g);
  };
  const int64_t kept_end = std::min<int64_t>(n, R + S);
  GradTerms<T> reread = terms;
  if (terms.masked_out) {  // g as pass 1 wrote it, with no mask to apply again
    reread.dy = terms.masked_out;
    reread.relu_y = nullptr;
    reread.invstd = nullptr;
    reread.masked_out = nullptr;
  }
  for (int64_t i = n - 1; i >= kept_end; i -= F) {
    Loaded l[F];
#pragma unroll
    for (int u = 0; u < F; ++u)
      if (i - u >= kept_end) reread.template load<V>(offset(i - u), l[u]);
#pragma unroll
    for (int u = 0; u < F; ++u) {
      if (i - u < kept_end) continue;
      A g[V], v[V];
      reread.template masked<V>(offset(i - u), l[u], pre, g, v);
      grad_input_values<A, V>(g, v, k);
      store_vec<T, V>(a.dx + offset(i - u), g);
    }
  }
  for (int64_t i = kept_end - 1; i >= R; --i)
    write(i, kept_row(cache, i - R, 0, 2), kept_row(cache, i - R, 1, 2));
#pragma unroll
  for (int i = R - 1; i >= 0; --i)
    if (i < n) write(i, kept_g[i], kept_x[i]);
}

// ---- launching -----------------------------------------------------------------------------

// Blocks of `kernel` that fit on the device at once (0: none), with its shared memory allowed
// (once per kernel; every device of a process is taken to be of one kind).
template <auto kernel>
int resident_blocks(int device) {
  static const int per_sm = [device] {
    // A GPU whose blocks cannot have this much shared memory (an A100's take 163 KB) runs none:
    // the callers then take the other routes, where asking for it anyway would throw.
    cudaFuncAttributes attributes{};
    NABLA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    int optin = 0;
    NABLA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (static_cast<size_t>(kSharedCacheBytes) + attributes.sharedSizeBytes > static_cast<size_t>(optin))
      return 0;
    NABLA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedCacheBytes));
    int n = 0;
    NABLA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, kSharedCacheBytes));
    return n;
  }();
  return per_sm * sm_count(device);
}

template <typename Args>
void launch(void (*kernel)(Args), int blocks, cudaStream_t stream, const Args& args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSharedCacheBytes;
  config.stream = stream;
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  NABLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
}

// Whether x (and every other pointer) suits the persistent kernels.
template <typename T>
bool persistent_layout(const ChannelBlocks& b, std::initializer_list<const void*> ptrs) {
  return b.inner == 1 && b.channels % kV == 0 && b.channels / kV <= kThreads && b.outer > 0 &&
         vector_width<T>(b, ptrs) >= kV;
}

template <typename Fn>
bool with_persistent_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case kFloat32:
      return fn.template operator()<float>();
    case kFloat16:
      return fn.template operator()<__half>();
    case kBFloat16:
      return fn.template operator()<__nv_bfloat16>();
    default:
      return false;
  }
}

bool layout_fits(const Tensor& x) {
  if (!x.is_cuda()) return false;
  if (!x.is_contiguous(MemoryFormat::ChannelsLast) && !(x.dim() == 2 && x.is_contiguous())) return false;
  const ChannelBlocks b = blocks_of(x);
  return with_persistent_dtype(x.dtype(),
                               [&]<typename T>() { return persistent_layout<T>(b, {x.data_ptr()}); });
}

}  // namespace

void set_persistent_batch_norm(bool on) {
  persistent_on.store(on, std::memory_order_relaxed);
}

bool persistent_batch_norm() {
  return persistent_on.load(std::memory_order_relaxed);
}

bool persistent_batch_norm_takes(const Tensor& x) {
  if (!persistent_batch_norm() || !layout_fits(x)) return false;
  return x.numel() / x.size(1) <= kPersistentMaxRows;
}

bool batch_norm_forward_persistent(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                                   double momentum, double eps, const Tensor& z, bool relu) {
  if (!layout_fits(in.x)) return false;
  const ChannelBlocks b = blocks_of(in.x);
  return with_persistent_dtype(in.x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    constexpr int V = kV;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    const auto* zp = ptr<const T>(z);
    if (!persistent_layout<T>(b, {x, yp, zp})) return false;
    const int blocks = resident_blocks<forward_kernel<T, V>>(in.x.device().index);
    if (blocks == 0) return false;
    const Tensor partial = Tensor::empty({blocks * 2 * b.channels}, stats.mean.options());
    const Tensor coef = Tensor::empty({kForwardCoefs * b.channels}, stats.mean.options());
    const ForwardArgs<T> args{x,
                              zp,
                              yp,
                              b.outer,
                              b.channels,
                              relu,
                              eps,
                              momentum,
                              {ptr<A>(in.weight), ptr<A>(in.bias), ptr<A>(stats.mean), ptr<A>(stats.invstd),
                               ptr<A>(in.running_mean), ptr<A>(in.running_var), ptr<A>(coef)},
                              ptr<A>(partial)};
    launch(forward_kernel<T, V>, blocks, stream_for(in.x), args);
    return true;
  });
}

bool batch_norm_backward_persistent(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    const BatchNormStats& stats, const BatchNormGrads& grads,
                                    const Tensor& relu_y, const ReluMaskFromX& mask_from_x) {
  if (!layout_fits(x)) return false;
  const ChannelBlocks b = blocks_of(x);
  return with_persistent_dtype(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    constexpr int V = kV;
    const auto* xp = static_cast<const T*>(x.data_ptr());
    const auto* dyp = static_cast<const T*>(dy.data_ptr());
    auto* dxp = ptr<T>(grads.dx);
    auto* dzp = ptr<T>(grads.dresidual);
    const auto* yp = ptr<const T>(relu_y);
    if (!persistent_layout<T>(b, {xp, dyp, dxp, dzp, yp})) return false;
    const int blocks = resident_blocks<backward_kernel<T, V>>(x.device().index);
    if (blocks == 0) return false;
    const bool from_x = mask_from_x.on;
    const Tensor partial = Tensor::empty({blocks * 2 * b.channels}, stats.mean.options());
    const Tensor coef = Tensor::empty({kBackwardMaskCoefs * b.channels}, stats.mean.options());
    GradTerms<T> terms{dyp, xp, yp, ptr<A>(stats.mean), dzp};
    if (from_x) {
      terms.invstd = ptr<A>(stats.invstd);
      terms.weight = ptr<A>(weight);
      terms.bias = ptr<A>(mask_from_x.bias);
    }
    const BackwardArgs<T> args{
        terms,
        dxp,
        b.outer,
        b.channels,
        {ptr<A>(stats.mean), ptr<A>(stats.invstd), ptr<A>(weight), ptr<A>(mask_from_x.bias), from_x,
         ptr<A>(coef), ptr<A>(grads.dweight), ptr<A>(grads.dbias)},
        ptr<A>(partial)};
    launch(backward_kernel<T, V>, blocks, stream_for(x), args);
    return true;
  });
}

}  // namespace nabla::ops::cuda
