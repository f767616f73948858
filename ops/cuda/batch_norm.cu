// nabla's own CUDA batch-norm kernels, for the calls cuDNN does not take (Note [cuDNN batch
// norm] in batch_norm_cudnn.cpp): bfloat16 outside channels_last training, very large batches, and anything
// cuDNN refuses.
//
// x is read in place as `outer` blocks of (C, inner), like the CPU kernel: inner = prod(*) for
// contiguous x, 1 for channels_last. The statistics take one block per channel (two passes:
// the mean, then the squared deviations, so the variance does not cancel), and the elementwise
// kernels recover each element's channel as (e / inner) % C. Simple rather than fast: the
// per-channel reads of a channels_last x are strided, which is the price of a fallback path.
// Float16/bfloat16 compute in float; the statistics are float (double for float64).
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/norm_kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr int kChannelThreads = 512;

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

// Element m (of outer * inner) of channel c.
__device__ __forceinline__ int64_t channel_offset(int64_t m, int64_t c, int64_t channels, int64_t inner) {
  return ((m / inner) * channels + c) * inner + m % inner;
}

// Sums each of v[0..K) over the block; every thread gets the totals.
template <int K, typename A>
__device__ void block_sum(A (&v)[K]) {
  __shared__ A partial[K][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int k = 0; k < K; ++k) {
    for (int mask = 16; mask > 0; mask /= 2) v[k] += __shfl_xor_sync(0xffffffffu, v[k], mask);
    if (lane == 0) partial[k][warp] = v[k];
  }
  __syncthreads();
  for (int k = 0; k < K; ++k) {
    A total = A(0);
    for (int w = 0; w < warps; ++w) total += partial[k][w];  // same order in every thread
    v[k] = total;
  }
  __syncthreads();  // partial may be reused by the next call
}

template <typename T>
__global__ void __launch_bounds__(kChannelThreads)
    stats_kernel(const T* __restrict__ x, int64_t per_channel, int64_t channels, int64_t inner, double eps,
                 double momentum, acc_t<T>* save_mean, acc_t<T>* save_invstd, acc_t<T>* running_mean,
                 acc_t<T>* running_var) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x;
  A sum[1] = {A(0)};
  for (int64_t m = threadIdx.x; m < per_channel; m += blockDim.x)
    sum[0] += load_as_acc(x[channel_offset(m, c, channels, inner)]);
  block_sum(sum);
  const A mean = sum[0] / static_cast<A>(per_channel);
  A squares[1] = {A(0)};
  for (int64_t m = threadIdx.x; m < per_channel; m += blockDim.x) {
    const A d = load_as_acc(x[channel_offset(m, c, channels, inner)]) - mean;
    squares[0] += d * d;
  }
  block_sum(squares);
  if (threadIdx.x != 0) return;
  const A var = squares[0] / static_cast<A>(per_channel);
  save_mean[c] = mean;
  save_invstd[c] = A(1) / sqrt(var + static_cast<A>(eps));
  if (running_mean) {
    const A m = static_cast<A>(momentum);
    running_mean[c] = (A(1) - m) * running_mean[c] + m * mean;
    running_var[c] = (A(1) - m) * running_var[c] + m * squares[0] / static_cast<A>(per_channel - 1);
  }
}

// y = (x - mean[c]) * invstd[c] * w[c] + b[c]; with `from_var`, `scale` holds variances.
template <typename T>
__global__ void normalize_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t numel, int64_t channels,
                                 int64_t inner, const acc_t<T>* __restrict__ mean,
                                 const acc_t<T>* __restrict__ scale, bool from_var, double eps,
                                 const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b) {
  using A = acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < numel;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = (e / inner) % channels;
    const A invstd = from_var ? A(1) / sqrt(scale[c] + static_cast<A>(eps)) : scale[c];
    A v = (load_as_acc(x[e]) - mean[c]) * invstd;
    if (w) v *= w[c];
    if (b) v += b[c];
    y[e] = store_from<T>(v);
  }
}

// Per channel: sums[c] = sum(dy), sums[C + c] = sum(dy * (x - mean)); the weight and bias
// gradients follow from them.
template <typename T>
__global__ void __launch_bounds__(kChannelThreads)
    grad_sums_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t per_channel, int64_t channels,
                     int64_t inner, const acc_t<T>* mean, const acc_t<T>* invstd, acc_t<T>* sums,
                     acc_t<T>* dweight, acc_t<T>* dbias) {
  using A = acc_t<T>;
  const int64_t c = blockIdx.x;
  const A m = mean[c];
  A v[2] = {A(0), A(0)};
  for (int64_t i = threadIdx.x; i < per_channel; i += blockDim.x) {
    const int64_t off = channel_offset(i, c, channels, inner);
    const A g = load_as_acc(dy[off]);
    v[0] += g;
    v[1] += g * (load_as_acc(x[off]) - m);
  }
  block_sum(v);
  if (threadIdx.x != 0) return;
  sums[c] = v[0];
  sums[channels + c] = v[1];
  if (dweight) dweight[c] = v[1] * invstd[c];
  if (dbias) dbias[c] = v[0];
}

// dx = w * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))).
template <typename T>
__global__ void grad_input_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                  int64_t numel, int64_t channels, int64_t inner, int64_t per_channel,
                                  const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ invstd,
                                  const acc_t<T>* __restrict__ sums, const acc_t<T>* __restrict__ w) {
  using A = acc_t<T>;
  const A count = static_cast<A>(per_channel);
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < numel;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = (e / inner) % channels;
    const A is = invstd[c];
    const A proj = sums[channels + c] / count * is * is;
    const A xmu = load_as_acc(x[e]) - mean[c];
    const A g = load_as_acc(dy[e]) - sums[c] / count - xmu * proj;
    dx[e] = store_from<T>(g * is * (w ? w[c] : A(1)));
  }
}

template <typename P>
P* ptr(const Tensor& t) {
  return t.defined() ? static_cast<P*>(t.data_ptr()) : nullptr;
}

}  // namespace

void batch_norm_forward_kernel(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                               double momentum, double eps) {
  const ChannelBlocks b = blocks_of(in.x);
  const cudaStream_t stream = stream_for(in.x);
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* x = static_cast<const T*>(in.x.data_ptr());
    stats_kernel<T><<<static_cast<unsigned>(b.channels), kChannelThreads, 0, stream>>>(
        x, b.per_channel(), b.channels, b.inner, eps, momentum, ptr<A>(stats.mean), ptr<A>(stats.invstd),
        ptr<A>(in.running_mean), ptr<A>(in.running_var));
    NABLA_CUDA_CHECK_LAUNCH();
    const int64_t numel = in.x.numel();
    normalize_kernel<T><<<blocks_for(numel, 4), kBlockSize, 0, stream>>>(
        x, static_cast<T*>(y.data_ptr()), numel, b.channels, b.inner, ptr<A>(stats.mean),
        ptr<A>(stats.invstd), false, eps, ptr<A>(in.weight), ptr<A>(in.bias));
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_inference_kernel(const BatchNormInputs& in, const Tensor& y, double eps) {
  const int64_t numel = in.x.numel();
  if (numel == 0) return;
  const ChannelBlocks b = blocks_of(in.x);
  dispatch_device<TypeSet::Floating>(in.x.dtype(), "batch_norm", [&]<typename T>() {
    using A = acc_t<T>;
    normalize_kernel<T><<<blocks_for(numel, 4), kBlockSize, 0, stream_for(in.x)>>>(
        static_cast<const T*>(in.x.data_ptr()), static_cast<T*>(y.data_ptr()), numel, b.channels, b.inner,
        ptr<A>(in.running_mean), ptr<A>(in.running_var), true, eps, ptr<A>(in.weight), ptr<A>(in.bias));
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const BatchNormStats& stats, const BatchNormGrads& grads) {
  const ChannelBlocks b = blocks_of(x);
  const cudaStream_t stream = stream_for(x);
  Tensor sums = Tensor::empty({2 * b.channels}, stats.mean.options());
  dispatch_device<TypeSet::Floating>(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using A = acc_t<T>;
    const auto* xp = static_cast<const T*>(x.data_ptr());
    const auto* dyp = static_cast<const T*>(dy.data_ptr());
    grad_sums_kernel<T><<<static_cast<unsigned>(b.channels), kChannelThreads, 0, stream>>>(
        dyp, xp, b.per_channel(), b.channels, b.inner, ptr<A>(stats.mean), ptr<A>(stats.invstd), ptr<A>(sums),
        ptr<A>(grads.dweight), ptr<A>(grads.dbias));
    NABLA_CUDA_CHECK_LAUNCH();
    if (!grads.dx.defined()) return;
    const int64_t numel = x.numel();
    grad_input_kernel<T><<<blocks_for(numel, 4), kBlockSize, 0, stream>>>(
        dyp, xp, static_cast<T*>(grads.dx.data_ptr()), numel, b.channels, b.inner, b.per_channel(),
        ptr<A>(stats.mean), ptr<A>(stats.invstd), ptr<A>(sums), ptr<A>(weight));
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
