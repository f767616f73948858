// CUDA layer norm over contiguous (rows, D) matrices.
//
// Two designs. The vector path takes the transformer case: D a whole number of 16-byte vectors
// (4 float32, 8 16-bit or 2 float64 elements), 16-byte aligned pointers, and rows short enough to
// sit in registers (D up to 8192 in the forward and 4096 in the backward; 4096 and 2048 for
// float64). A group of L lanes holds a row, C vectors per lane (C a template argument), read once
// with 16-byte loads: the statistics come from registers (the mean, then the squared deviations,
// the two passes of the generic kernel) and y leaves with 16-byte stores. Its backward is one
// kernel, one wave of blocks: each sweeps a fixed share of the rows, writes dx and keeps its lanes'
// column sums of dy * xhat and dy in registers (a lane holds the same columns in every row), then
// adds its row groups' sums in shared memory into one row of partials, which a second kernel adds
// in a fixed order. So x and dy are read once, and dweight and dbias need no atomics and are
// deterministic (the split follows the SM count, as batch norm's does: fixed for a device).
//
// The generic kernels take any D and alignment. Forward and the input gradient take a group of
// lanes per row: a sub-warp or a warp for rows of up to 1024 elements (several rows per 256-thread
// block), a 512-thread block for longer rows; each pass reads the row again from cache rather than
// holding it in registers, so one kernel fits every D. The weight and bias gradients are column
// sums over rows: blocks of 32 columns by 8 row lanes write per-block partials, added by the same
// fixed-order kernel.
// Float16/bfloat16 compute in float; mean and 1 / std are float (double for float64).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/norm/kernels.h"
#include "nabla/ops/cuda/reduce/layout.h"

namespace nabla::ops::cuda {

namespace {

constexpr int kColumns = 32;  // columns per block of the parameter-gradient kernel
constexpr int kRowLanes = 8;  // row lanes per block of the parameter-gradient kernel
constexpr int kLongRowThreads = 512;
constexpr int kSumColumns = 32;   // columns per block of the partial-sum kernel
constexpr int kSumLanes = 16;     // part lanes per block of the partial-sum kernel
constexpr int kVecThreads = 256;  // threads per block of the vector kernels: (lanes, rows)
// Blocks per SM of the vector backward (its __launch_bounds__). With parameter gradients it runs
// this many blocks per SM, one wave, each sweeping an equal share of the rows, so the partials
// stay small (2 x parts x D) and no block waits on a second wave.
constexpr int kBackwardBlocksPerSm = 2;

// Elements of T in one 16-byte load or store.
template <typename T>
inline constexpr int kVec = static_cast<int>(16 / sizeof(T));

// Vectors per lane (C), at most, so a lane's share of a row fits registers without spilling: the
// forward holds one row slice of C * kVec opmath values (up to 32 floats or 16 doubles); the
// backward holds five (x, dy, the weight and the two column sums, up to 16 floats or 8 doubles
// each) in the 128 registers that let two 256-thread blocks share an SM. Longer rows take more
// lanes. (ptxas spilled at the next count up, C = 6 for float32.)
template <typename T>
inline constexpr int kForwardMaxPerLane = static_cast<int>(128 / (kVec<T> * sizeof(opmath_t<T>)));
template <typename T>
inline constexpr int kBackwardMaxPerLane = static_cast<int>(64 / (kVec<T> * sizeof(opmath_t<T>)));

// V elements of T to and from registers of type A (Aligned and load_vector/store_vector of
// elementwise/elementwise.cuh, as the other vectorized kernels use). V is the count of x's 16-byte vector; a
// 16-bit y or dy beside a float32 x moves in 8-byte pieces.
template <typename T, int V, typename A>
__device__ __forceinline__ void load_vec(const T* p, A (&out)[V]) {
  const auto in = load_vector<Aligned<T, V>>(p);
#pragma unroll
  for (int k = 0; k < V; ++k) out[k] = static_cast<A>(load_as_opmath(in.v[k]));
}

template <typename T, int V, typename A>
__device__ __forceinline__ void store_vec(T* p, const A (&in)[V]) {
  Aligned<T, V> out;
#pragma unroll
  for (int k = 0; k < V; ++k) out.v[k] = store_from<T>(static_cast<opmath_t<T>>(in[k]));
  store_vector(p, out);
}

// Sums v over the blockDim.x lanes of a row group; every lane gets the total.
template <typename A>
__device__ A row_sum(A v) {
  for (unsigned mask = min(blockDim.x, 32u) / 2; mask > 0; mask /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, mask);
  if (blockDim.x > 32) {  // a whole block per row
    __shared__ A per_warp[kLongRowThreads / 32];
    if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
    __syncthreads();
    v = A(0);
    for (unsigned w = 0; w < blockDim.x / 32; ++w) v += per_warp[w];
    __syncthreads();
  }
  return v;
}

template <typename A>
__device__ __forceinline__ A inverse_sqrt(A v) {
  if constexpr (std::is_same_v<A, float>) {
    return rsqrtf(v);
  } else {
    return A(1) / sqrt(v);
  }
}

// Sums each v[k] over the blockDim.x lanes of a row group (blockDim.y groups per block, kVecThreads
// threads); every lane gets the same totals. Groups of up to 32 lanes stay within their warp;
// wider groups add their warps' sums through shared memory in a fixed order. Every thread of the
// block must call it (it synchronizes the block when groups are wider than a warp).
template <int N, typename A>
__device__ __forceinline__ void group_sum(A (&v)[N]) {
  for (unsigned mask = min(blockDim.x, 32u) / 2; mask > 0; mask /= 2) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], mask);
  }
  if (blockDim.x > 32) {
    __shared__ A per_warp[kVecThreads / 32][N];
    const unsigned warps = blockDim.x / 32, first = threadIdx.y * warps;
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int k = 0; k < N; ++k) per_warp[first + threadIdx.x / 32][k] = v[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < N; ++k) {
      v[k] = A(0);
      for (unsigned i = 0; i < warps; ++i) v[k] += per_warp[first + i][k];
    }
    __syncthreads();
  }
}

// ---- vector path ---------------------------------------------------------------------------
// Block (L, kVecThreads / L): L lanes per row. Lane t holds vectors t, t + L, ..., t + (C - 1) L of
// its row (the last may lie past the row's nvec = D / kVec vectors), so each load of a warp covers
// consecutive 16-byte vectors and a lane sees the same columns in every row.

// Three blocks per SM caps registers at 80: ptxas otherwise spills a few bytes at C = 6.
// y may be float16/bfloat16 beside a float32 x (Y): layer_norm's output dtype option. With a
// residual (add_layer_norm), the row normalized is x + residual (R, of x's dtype or 16-bit beside
// a float32 x), rounded to T and stored to sum_out, as the add before the norm would.
template <typename T, int C, typename Y = T, typename R = T>
__global__ void __launch_bounds__(kVecThreads, 3)
    forward_vec_kernel(const T* __restrict__ x, const R* __restrict__ residual, const T* __restrict__ w,
                       const T* __restrict__ b, Y* __restrict__ y, T* __restrict__ sum_out,
                       opmath_t<T>* __restrict__ mean_out, opmath_t<T>* __restrict__ rstd_out, int64_t rows,
                       int D, double eps, bool centre) {
  using A = opmath_t<T>;
  constexpr int V = kVec<T>;
  const int lanes = static_cast<int>(blockDim.x), nvec = D / V;
  const int64_t row = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const T* xr = x + row * D;
  A v[C][V];  // zero in padding slots and idle rows
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i = c * lanes + static_cast<int>(threadIdx.x);
    if (active && i < nvec) {
      load_vec(xr + i * V, v[c]);
      if (residual) {
        A r[V];
        load_vec(residual + row * D + i * V, r);
#pragma unroll
        for (int k = 0; k < V; ++k) v[c][k] = load_as_opmath(store_from<T>(v[c][k] + r[k]));
        store_vec(sum_out + row * D + i * V, v[c]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) v[c][k] = A(0);
    }
  }
  A mean = A(0);
  if (centre) {
    A sum[1] = {A(0)};
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int k = 0; k < V; ++k) sum[0] += v[c][k];
    }
    group_sum(sum);
    mean = sum[0] / static_cast<A>(D);
  }
  // Squared deviations over the row's own vectors only (a padding slot's 0 - mean is not one).
  A squares[1] = {A(0)};
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (c * lanes + static_cast<int>(threadIdx.x) < nvec) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A d = v[c][k] - mean;
        squares[0] += d * d;
      }
    }
  }
  group_sum(squares);
  const A rstd = inverse_sqrt(squares[0] / static_cast<A>(D) + static_cast<A>(eps));
  if (!active) return;
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i = c * lanes + static_cast<int>(threadIdx.x);
    if (i >= nvec) continue;
    A out[V];
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = (v[c][k] - mean) * rstd;
    if (w) {
      A wv[V];
      load_vec(w + i * V, wv);
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] *= wv[k];
    }
    if (b) {
      A bv[V];
      load_vec(b + i * V, bv);
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] += bv[k];
    }
    store_vec(y + row * D + i * V, out);
  }
}

// dx as grad_input_kernel below (dx non-null) and the parameter partials in param_partials_kernel's
// layout (partial non-null), the grid's blocks being the parts. Block p's row group ty runs rows
// (s * gridDim.x + p) * blockDim.y + ty for sweeps s = 0, 1, ...; every thread runs every sweep
// (idle past the last row) so that group_sum's barriers stay in step. The weight of a lane's
// columns is loaded once, before the sweeps.
// dy may be float16/bfloat16 beside a float32 x (G), the gradient of a lower-precision output.
// add_layer_norm's backward: x is the saved sum, dsum (nullable) the gradient that reached the sum
// directly, added to dx; dresidual (nullable, R) gets the same total in the residual's dtype.
template <typename T, int C, typename G = T, typename R = T>
__global__ void __launch_bounds__(kVecThreads, kBackwardBlocksPerSm)
    backward_vec_kernel(const G* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                        const opmath_t<T>* __restrict__ mean, const opmath_t<T>* __restrict__ rstd,
                        const T* __restrict__ dsum, T* __restrict__ dx, R* __restrict__ dresidual,
                        opmath_t<T>* __restrict__ partial, int64_t rows, int D, bool centre) {
  using A = opmath_t<T>;
  constexpr int V = kVec<T>;
  const int lanes = static_cast<int>(blockDim.x), nvec = D / V;
  const int64_t stride = int64_t{gridDim.x} * blockDim.y;
  const int64_t sweeps = (rows + stride - 1) / stride;
  A wv[C][V], acc_w[C][V], acc_b[C][V];  // this lane's columns: w, sum dy * xhat, sum dy
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i = c * lanes + static_cast<int>(threadIdx.x);
    if (w && i < nvec) {
      load_vec(w + i * V, wv[c]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) wv[c][k] = A(1);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) acc_w[c][k] = acc_b[c][k] = A(0);
  }
  for (int64_t s = 0; s < sweeps; ++s) {
    const int64_t row = s * stride + int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
    const bool active = row < rows;
    const T* xr = x + row * D;
    const G* dyr = dy + row * D;
    A xhat[C][V], g[C][V];  // x, then xhat; dy, then dy * w. Zero in padding slots and idle rows.
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int i = c * lanes + static_cast<int>(threadIdx.x);
      if (active && i < nvec) {
        load_vec(xr + i * V, xhat[c]);
        load_vec(dyr + i * V, g[c]);
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) xhat[c][k] = g[c][k] = A(0);
      }
    }
    const A m = active ? mean[row] : A(0), r = active ? rstd[row] : A(0);
    A sums[2] = {A(0), A(0)};  // sum g, sum g * xhat over the row
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        // A padding slot's xhat is -m * r, but its dy is 0, so it adds nothing anywhere.
        xhat[c][k] = (xhat[c][k] - m) * r;
        acc_w[c][k] += g[c][k] * xhat[c][k];
        acc_b[c][k] += g[c][k];
        g[c][k] *= wv[c][k];
        sums[0] += g[c][k];
        sums[1] += g[c][k] * xhat[c][k];
      }
    }
    group_sum(sums);
    const A g_mean = centre ? sums[0] / static_cast<A>(D) : A(0);
    const A gx_mean = sums[1] / static_cast<A>(D);
    if (!active || !dx) continue;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int i = c * lanes + static_cast<int>(threadIdx.x);
      if (i >= nvec) continue;
      A out[V];
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = r * (g[c][k] - g_mean - xhat[c][k] * gx_mean);
      if (dsum) {
        A direct[V];
        load_vec(dsum + row * D + i * V, direct);
#pragma unroll
        for (int k = 0; k < V; ++k) out[k] = load_as_opmath(store_from<T>(out[k])) + direct[k];
      }
      store_vec(dx + row * D + i * V, out);
      if (dresidual) store_vec(dresidual + row * D + i * V, out);
    }
  }
  if (!partial) return;
  // The block's row groups' column sums, added in row-group order, one slot c at a time: thread
  // (tx, ty) parks its slot at [ty][tx * V + k], which is column c * L * V + tx * V + k.
  __shared__ A parked[2][kVecThreads * V];
  const int width = lanes * V, threads = lanes * static_cast<int>(blockDim.y);
  const int tid = static_cast<int>(threadIdx.y) * lanes + static_cast<int>(threadIdx.x);
  const int64_t parts = gridDim.x;
#pragma unroll
  for (int c = 0; c < C; ++c) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      parked[0][tid * V + k] = acc_w[c][k];
      parked[1][tid * V + k] = acc_b[c][k];
    }
    __syncthreads();
    for (int q = tid; q < 2 * width; q += threads) {
      const int which = q / width, col = c * width + q % width;
      if (col >= D) continue;
      A sum = A(0);
      for (unsigned group = 0; group < blockDim.y; ++group) sum += parked[which][group * width + q % width];
      partial[(which * parts + blockIdx.x) * D + col] = sum;
    }
    __syncthreads();
  }
}

// ---- generic path --------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(512)
    forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                   T* __restrict__ y, opmath_t<T>* mean_out, opmath_t<T>* rstd_out, int64_t rows, int64_t D,
                   double eps, bool centre) {
  using A = opmath_t<T>;
  const int64_t row = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const T* xr = x + row * D;
  A sum = A(0);
  if (active && centre) {
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) sum += load_as_opmath(xr[j]);
  }
  const A mean = centre ? row_sum(sum) / static_cast<A>(D) : A(0);
  A squares = A(0);
  if (active) {
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const A d = load_as_opmath(xr[j]) - mean;
      squares += d * d;
    }
  }
  const A rstd = inverse_sqrt(row_sum(squares) / static_cast<A>(D) + static_cast<A>(eps));
  if (!active) return;
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  T* yr = y + row * D;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    A v = (load_as_opmath(xr[j]) - mean) * rstd;
    if (w) v *= load_as_opmath(w[j]);
    if (b) v += load_as_opmath(b[j]);
    yr[j] = store_from<T>(v);
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), with g = dy * w and xhat = (x - mean) * rstd;
// RMS norm (centre false) drops mean(g).
template <typename T>
__global__ void __launch_bounds__(512)
    grad_input_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                      const opmath_t<T>* __restrict__ mean, const opmath_t<T>* __restrict__ rstd,
                      T* __restrict__ dx, int64_t rows, int64_t D, bool centre) {
  using A = opmath_t<T>;
  const int64_t row = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const A m = active ? mean[row] : A(0), s = active ? rstd[row] : A(0);
  const T* xr = x + row * D;
  const T* gr = dy + row * D;
  A sum_g = A(0), sum_gx = A(0);
  if (active) {
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const A g = load_as_opmath(gr[j]) * (w ? load_as_opmath(w[j]) : A(1));
      sum_g += g;
      sum_gx += g * (load_as_opmath(xr[j]) - m) * s;
    }
  }
  const A g_mean = centre ? row_sum(sum_g) / static_cast<A>(D) : A(0);
  const A gx_mean = row_sum(sum_gx) / static_cast<A>(D);
  if (!active) return;
  T* dxr = dx + row * D;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const A g = load_as_opmath(gr[j]) * (w ? load_as_opmath(w[j]) : A(1));
    const A xhat = (load_as_opmath(xr[j]) - m) * s;
    dxr[j] = store_from<T>(s * (g - g_mean - xhat * gx_mean));
  }
}

// Block (kColumns, kRowLanes), grid (column blocks, parts): part p sums rows p * kRowLanes + ty,
// stepping by parts * kRowLanes, into partial[p][j] (sum dy * xhat) and partial[parts + p][j] (sum dy).
template <typename T>
__global__ void param_partials_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const opmath_t<T>* __restrict__ mean,
                                      const opmath_t<T>* __restrict__ rstd, opmath_t<T>* __restrict__ partial,
                                      int64_t rows, int64_t D) {
  using A = opmath_t<T>;
  __shared__ A shared_w[kRowLanes][kColumns + 1], shared_b[kRowLanes][kColumns + 1];
  const int64_t j = int64_t{blockIdx.x} * kColumns + threadIdx.x;
  const int64_t parts = gridDim.y;
  A acc_w = A(0), acc_b = A(0);
  if (j < D) {
    for (int64_t r = int64_t{blockIdx.y} * kRowLanes + threadIdx.y; r < rows; r += parts * kRowLanes) {
      const A g = load_as_opmath(dy[r * D + j]);
      acc_w += g * (load_as_opmath(x[r * D + j]) - mean[r]) * rstd[r];
      acc_b += g;
    }
  }
  shared_w[threadIdx.y][threadIdx.x] = acc_w;
  shared_b[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y != 0 || j >= D) return;
  for (int k = 1; k < kRowLanes; ++k) {
    acc_w += shared_w[k][threadIdx.x];
    acc_b += shared_b[k][threadIdx.x];
  }
  partial[blockIdx.y * D + j] = acc_w;
  partial[(parts + blockIdx.y) * D + j] = acc_b;
}

// dweight (blockIdx.y 0) and dbias (1) from the partials of either path. Block (kSumColumns,
// kSumLanes): lane ty adds parts ty, ty + kSumLanes, ... of its column, then lane 0 adds the lanes
// in order, so the sum is fixed for a given number of parts and the loads of many parts overlap.
template <typename T>
__global__ void param_sum_kernel(const opmath_t<T>* __restrict__ partial, int64_t parts, int64_t D,
                                 T* dweight, T* dbias) {
  using A = opmath_t<T>;
  T* out = blockIdx.y == 0 ? dweight : dbias;
  if (!out) return;
  __shared__ A lane_sums[kSumLanes][kSumColumns + 1];
  const int64_t j = int64_t{blockIdx.x} * kSumColumns + threadIdx.x;
  const A* p = partial + blockIdx.y * parts * D;
  A sum = A(0);
  if (j < D) {
#pragma unroll 4
    for (int64_t q = threadIdx.y; q < parts; q += kSumLanes) sum += p[q * D + j];
  }
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || j >= D) return;
  for (int k = 1; k < kSumLanes; ++k) sum += lane_sums[k][threadIdx.x];
  out[j] = store_from<T>(sum);
}

// Lanes per row and rows per block for rows of D elements.
dim3 row_block(int64_t D) {
  if (D > 1024) return dim3(kLongRowThreads, 1);
  unsigned lanes = 1;
  while (lanes < 32 && lanes < D) lanes *= 2;
  return dim3(lanes, 256 / lanes);
}

unsigned row_grid(int64_t rows, const dim3& block) {
  const int64_t blocks = (rows + block.y - 1) / block.y;
  NABLA_ASSERT(blocks < (int64_t{1} << 31), "layer_norm grid of {} blocks", blocks);
  return static_cast<unsigned>(blocks);
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Lanes per row and vectors per lane (C) of the vector kernels for rows of nvec 16-byte vectors;
// lanes 0 where a row would need more than max_per_lane vectors on each of kVecThreads lanes.
// Short rows take a sub-warp, rows up to 32 * max_per_lane vectors a warp (no block barriers),
// longer ones the fewest warps that hold them. C is rounded up to an instantiated count.
struct VecShape {
  int lanes = 0, per_lane = 0;
};

VecShape vec_shape(int64_t nvec, int max_per_lane) {
  int lanes = 1;
  while (lanes < 32 && lanes < nvec) lanes *= 2;
  while (lanes < kVecThreads && int64_t{lanes} * max_per_lane < nvec) lanes *= 2;
  if (int64_t{lanes} * max_per_lane < nvec) return {};
  const int per_lane = static_cast<int>((nvec + lanes - 1) / lanes);
  return {lanes, per_lane <= 4 ? per_lane : per_lane <= 6 ? 6 : 8};
}

// The vector shape for rows of D elements of T, or lanes 0 where D is not a whole number of
// vectors or a pointer (null allowed) is not 16-byte aligned.
template <typename T>
VecShape vec_shape_for(int64_t D, int max_per_lane, std::initializer_list<const void*> ptrs) {
  if (D % kVec<T> != 0) return {};
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return {};
  }
  return vec_shape(D / kVec<T>, max_per_lane);
}

// Calls fn.template operator()<C>() for per_lane, one of vec_shape's counts up to Max.
template <int Max, typename Fn>
void with_per_lane(int per_lane, Fn&& fn) {
  switch (per_lane) {
    case 1:
      return fn.template operator()<1>();
    case 2:
      return fn.template operator()<2>();
    case 3:
      if constexpr (Max >= 3) return fn.template operator()<3>();
      break;
    case 4:
      if constexpr (Max >= 4) return fn.template operator()<4>();
      break;
    case 6:
      if constexpr (Max >= 6) return fn.template operator()<6>();
      break;
    case 8:
      if constexpr (Max >= 8) return fn.template operator()<8>();
      break;
    default:
      break;
  }
  NABLA_ASSERT(false, "layer_norm: {} vectors per lane", per_lane);
}

// The sums of the 2 x parts x D partials into dweight and dbias (either may be undefined).
template <typename T>
void launch_param_sum(const Tensor& partial, int64_t parts, int64_t D, const Tensor& dweight,
                      const Tensor& dbias, cudaStream_t stream) {
  using A = opmath_t<T>;
  const int64_t column_blocks = (D + kSumColumns - 1) / kSumColumns;
  NABLA_ASSERT(column_blocks < (int64_t{1} << 31), "layer_norm_backward grid of {} blocks", column_blocks);
  param_sum_kernel<T>
      <<<dim3(static_cast<unsigned>(column_blocks), 2), dim3(kSumColumns, kSumLanes), 0, stream>>>(
          ptr<const A>(partial), parts, D, ptr<T>(dweight), ptr<T>(dbias));
  NABLA_CUDA_CHECK_LAUNCH();
}

// Calls fn.template operator()<Y>() for y's (or dy's) element type: T itself, or float16/bfloat16
// beside a float32 T.
template <typename T, typename Fn>
void with_io_type(DType x_dtype, DType dtype, Fn&& fn) {
  if (dtype == x_dtype) return fn.template operator()<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (dtype == kBFloat16) return fn.template operator()<__nv_bfloat16>();
    if (dtype == kFloat16) return fn.template operator()<__half>();
  }
  NABLA_ASSERT(false, "layer_norm: output dtype {} beside a {} input", dtype_name(dtype),
               dtype_name(x_dtype));
}

// Whether a y, dy or residual of `dtype` can sit beside x on the vector kernels.
bool pairs_with(DType x, DType dtype) {
  return dtype == x || (x == kFloat32 && (dtype == kBFloat16 || dtype == kFloat16));
}

}  // namespace

bool layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd, RowNorm kind,
                        const Tensor& residual, const Tensor& sum) {
  const int64_t rows = x.size(0), D = x.size(1);
  const bool mixed = y.dtype() != x.dtype() || residual.defined();
  if (!pairs_with(x.dtype(), y.dtype())) return false;
  if (residual.defined() && !pairs_with(x.dtype(), residual.dtype())) return false;
  if (rows == 0 || D == 0) return true;
  const cudaStream_t stream = stream_for(x);
  bool ran = true;
  dispatch_device<TypeSet::Floating>(x.dtype(), "layer_norm", [&]<typename T>() {
    using A = opmath_t<T>;
    const VecShape shape = vec_shape_for<T>(
        D, kForwardMaxPerLane<T>,
        {x.data_ptr(), ptr<const T>(weight), ptr<const T>(bias), y.data_ptr(),
         residual.defined() ? residual.data_ptr() : nullptr, sum.defined() ? sum.data_ptr() : nullptr});
    if (shape.lanes > 0) {
      const dim3 block(shape.lanes, kVecThreads / shape.lanes);
      with_io_type<T>(x.dtype(), y.dtype(), [&]<typename Y>() {
        with_io_type<T>(x.dtype(), residual.defined() ? residual.dtype() : x.dtype(), [&]<typename R>() {
          with_per_lane<kForwardMaxPerLane<T>>(shape.per_lane, [&]<int C>() {
            forward_vec_kernel<T, C, Y, R><<<row_grid(rows, block), block, 0, stream>>>(
                ptr<const T>(x), ptr<const R>(residual), ptr<const T>(weight), ptr<const T>(bias), ptr<Y>(y),
                ptr<T>(sum), ptr<A>(mean), ptr<A>(rstd), rows, static_cast<int>(D), eps,
                kind == RowNorm::Layer);
          });
        });
      });
      NABLA_CUDA_CHECK_LAUNCH();
      return;
    }
    if (mixed) {  // the generic kernels take one dtype
      ran = false;
      return;
    }
    const dim3 block = row_block(D);
    forward_kernel<T><<<row_grid(rows, block), block, 0, stream>>>(
        ptr<const T>(x), ptr<const T>(weight), ptr<const T>(bias), ptr<T>(y), ptr<A>(mean), ptr<A>(rstd),
        rows, D, eps, kind == RowNorm::Layer);
    NABLA_CUDA_CHECK_LAUNCH();
  });
  return ran;
}

bool layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         RowNorm kind, const Tensor& dsum, const Tensor& dresidual) {
  const int64_t rows = x.size(0), D = x.size(1);
  const bool mixed = dy.dtype() != x.dtype() || dsum.defined() || dresidual.defined();
  if (!pairs_with(x.dtype(), dy.dtype())) return false;
  if (dresidual.defined() && !pairs_with(x.dtype(), dresidual.dtype())) return false;
  if ((dsum.defined() || dresidual.defined()) && !dx.defined()) return false;
  if (D == 0) return true;
  const cudaStream_t stream = stream_for(x);
  const bool params = dweight.defined() || dbias.defined();
  bool ran = true;
  dispatch_device<TypeSet::Floating>(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    const VecShape shape =
        rows > 0 && (dx.defined() || params)
            ? vec_shape_for<T>(D, kBackwardMaxPerLane<T>,
                               {dy.data_ptr(), x.data_ptr(), ptr<const T>(weight), ptr<const T>(dx),
                                ptr<const T>(dsum), dresidual.defined() ? dresidual.data_ptr() : nullptr})
            : VecShape{};
    if (shape.lanes > 0) {
      // One block per kVecThreads / lanes rows without parameter gradients; with them, one wave
      // of blocks sweeping the rows, each writing one row of partials. The split depends on the
      // SM count (as batch norm's does): deterministic on a given device.
      const dim3 block(shape.lanes, kVecThreads / shape.lanes);
      const int64_t wave = int64_t{kBackwardBlocksPerSm} * sm_count(x.device().index);
      const int64_t parts = std::min<int64_t>(row_grid(rows, block), params ? wave : int64_t{1} << 31);
      Tensor partial = params ? Tensor::empty({2 * parts * D}, mean.options()) : Tensor();
      with_io_type<T>(x.dtype(), dy.dtype(), [&]<typename G>() {
        with_io_type<T>(x.dtype(), dresidual.defined() ? dresidual.dtype() : x.dtype(), [&]<typename R>() {
          with_per_lane<kBackwardMaxPerLane<T>>(shape.per_lane, [&]<int C>() {
            backward_vec_kernel<T, C, G, R><<<static_cast<unsigned>(parts), block, 0, stream>>>(
                ptr<const G>(dy), ptr<const T>(x), ptr<const T>(weight), ptr<const A>(mean),
                ptr<const A>(rstd), ptr<const T>(dsum), ptr<T>(dx), ptr<R>(dresidual), ptr<A>(partial), rows,
                static_cast<int>(D), kind == RowNorm::Layer);
          });
        });
      });
      NABLA_CUDA_CHECK_LAUNCH();
      if (params) launch_param_sum<T>(partial, parts, D, dweight, dbias, stream);
      return;
    }
    if (mixed) {  // the generic kernels take one dtype
      ran = false;
      return;
    }
    if (dx.defined() && rows > 0) {
      const dim3 block = row_block(D);
      grad_input_kernel<T><<<row_grid(rows, block), block, 0, stream>>>(
          ptr<const T>(dy), ptr<const T>(x), ptr<const T>(weight), ptr<const A>(mean), ptr<const A>(rstd),
          ptr<T>(dx), rows, D, kind == RowNorm::Layer);
      NABLA_CUDA_CHECK_LAUNCH();
    }
    if (!params) return;
    const int64_t parts = std::min<int64_t>(256, std::max<int64_t>(1, (rows + 63) / 64));
    const int64_t column_blocks = (D + kColumns - 1) / kColumns;
    NABLA_ASSERT(column_blocks < (int64_t{1} << 31), "layer_norm_backward grid of {} blocks", column_blocks);
    Tensor partial = Tensor::empty({2 * parts * D}, mean.options());
    param_partials_kernel<T><<<dim3(static_cast<unsigned>(column_blocks), static_cast<unsigned>(parts)),
                               dim3(kColumns, kRowLanes), 0, stream>>>(
        ptr<const T>(dy), ptr<const T>(x), ptr<const A>(mean), ptr<const A>(rstd), ptr<A>(partial), rows, D);
    NABLA_CUDA_CHECK_LAUNCH();
    launch_param_sum<T>(partial, parts, D, dweight, dbias, stream);
  });
  return ran;
}

}  // namespace nabla::ops::cuda
