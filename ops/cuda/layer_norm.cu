// CUDA layer norm over contiguous (rows, D) matrices.
//
// Forward and the input gradient take a group of lanes per row: a sub-warp or a warp for rows
// of up to 1024 elements (several rows per 256-thread block), a 512-thread block for longer
// rows. Statistics are two-pass (the mean, then the squared deviations), reading the row again
// from cache rather than holding it in registers, so any D works with one kernel. The weight
// and bias gradients are column sums over rows: blocks of 32 columns by 8 row lanes write
// per-block partials, which a second kernel adds in a fixed order (deterministic, no atomics).
// Float16/bfloat16 compute in float; mean and 1 / std are float (double for float64).
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/norm_kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr int kColumns = 32;  // columns per block of the parameter-gradient kernel
constexpr int kRowLanes = 8;  // row lanes per block of the parameter-gradient kernel
constexpr int kLongRowThreads = 512;

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

template <typename T>
__global__ void param_sum_kernel(const opmath_t<T>* __restrict__ partial, int64_t parts, int64_t D,
                                 T* dweight, T* dbias) {
  using A = opmath_t<T>;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < D;
       j += int64_t{gridDim.x} * blockDim.x) {
    A w = A(0), b = A(0);
    for (int64_t p = 0; p < parts; ++p) {
      w += partial[p * D + j];
      b += partial[(parts + p) * D + j];
    }
    if (dweight) dweight[j] = store_from<T>(w);
    if (dbias) dbias[j] = store_from<T>(b);
  }
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

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd, RowNorm kind) {
  const int64_t rows = x.size(0), D = x.size(1);
  if (rows == 0 || D == 0) return;
  const dim3 block = row_block(D);
  dispatch_device<TypeSet::Floating>(x.dtype(), "layer_norm", [&]<typename T>() {
    using A = opmath_t<T>;
    forward_kernel<T><<<row_grid(rows, block), block, 0, stream_for(x)>>>(
        ptr<const T>(x), ptr<const T>(weight), ptr<const T>(bias), ptr<T>(y), ptr<A>(mean), ptr<A>(rstd),
        rows, D, eps, kind == RowNorm::Layer);
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         RowNorm kind) {
  const int64_t rows = x.size(0), D = x.size(1);
  if (D == 0) return;
  const cudaStream_t stream = stream_for(x);
  dispatch_device<TypeSet::Floating>(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    if (dx.defined() && rows > 0) {
      const dim3 block = row_block(D);
      grad_input_kernel<T><<<row_grid(rows, block), block, 0, stream>>>(
          ptr<const T>(dy), ptr<const T>(x), ptr<const T>(weight), ptr<const A>(mean), ptr<const A>(rstd),
          ptr<T>(dx), rows, D, kind == RowNorm::Layer);
      NABLA_CUDA_CHECK_LAUNCH();
    }
    if (!dweight.defined() && !dbias.defined()) return;
    const int64_t parts = std::min<int64_t>(256, std::max<int64_t>(1, (rows + 63) / 64));
    const int64_t column_blocks = (D + kColumns - 1) / kColumns;
    NABLA_ASSERT(column_blocks < (int64_t{1} << 31), "layer_norm_backward grid of {} blocks", column_blocks);
    Tensor partial = Tensor::empty({2 * parts * D}, mean.options());
    param_partials_kernel<T><<<dim3(static_cast<unsigned>(column_blocks), static_cast<unsigned>(parts)),
                               dim3(kColumns, kRowLanes), 0, stream>>>(
        ptr<const T>(dy), ptr<const T>(x), ptr<const A>(mean), ptr<const A>(rstd), ptr<A>(partial), rows, D);
    NABLA_CUDA_CHECK_LAUNCH();
    param_sum_kernel<T><<<blocks_for(D), kBlockSize, 0, stream>>>(ptr<const A>(partial), parts, D,
                                                                  ptr<T>(dweight), ptr<T>(dbias));
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
