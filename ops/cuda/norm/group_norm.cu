// Group normalization on nabla's kernels.
//
// Note [Group norm]: composed from ops, a group norm was a layer norm over each (sample, group),
// then a multiply and an add per channel and, for 16-bit inputs, a cast: four or five passes over
// the activation, and a copy first for channels_last inputs (the groups are not contiguous there).
// Here the forward is two passes: one block per (sample, group) sums the group's elements (shifted
// by its first element, so a large mean costs no precision) into its mean and 1 / std, then one
// elementwise pass writes y = (x - mean) * rstd * weight + bias in x's dtype. The backward is two
// passes too: one block per (sample, group) sums dy and dy * (x - mean) per channel, from which it writes
// that sample's share of dweight and dbias and the group's two sums the input gradient needs,
// sum(dy * w) and sum(dy * w * xhat); then dx = rstd * (dy * w - mean(dy * w) - xhat *
// mean(dy * w * xhat)) elementwise. NCHW and channels_last both read x where it lies. Every sum
// has a fixed order, so results repeat bit for bit.
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/norm/kernels.h"

namespace nabla::ops::cuda {

namespace {

// x viewed as (N, C, S), S the positions: NCHW at ((n C + c) S + s), NHWC at ((n S + s) C + c).
struct GroupShape {
  int64_t n, c, s, groups, per_group;  // per_group: channels in a group
};

template <bool kNhwc>
__device__ __forceinline__ int64_t offset_of(const GroupShape& g, int64_t n, int64_t c, int64_t s) {
  return kNhwc ? (n * g.s + s) * g.c + c : (n * g.c + c) * g.s + s;
}

constexpr int kThreads = 256;

// The sum of v over the block (kThreads threads), in a fixed order; every thread gets it.
template <typename A>
__device__ A block_sum(A v, A* shared) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // the previous call's readers are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? shared[lane] : A(0);
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) shared[32] = v;
  }
  __syncthreads();
  return shared[32];
}

// mean and rstd of group (n, g) = blockIdx.x. The group's elements in the order they lie: in
// NCHW one contiguous run; in NHWC runs of per_group channels, one per position.
template <typename T, bool kNhwc>
__global__ void group_stats_kernel(const T* __restrict__ x, GroupShape g, double eps,
                                   opmath_t<T>* __restrict__ mean, opmath_t<T>* __restrict__ rstd) {
  using A = opmath_t<T>;
  __shared__ A shared[33];
  const int64_t n = blockIdx.x / g.groups, group = blockIdx.x % g.groups;
  const int64_t count = g.per_group * g.s;
  const auto element = [&](int64_t e) {
    const int64_t c = group * g.per_group + (kNhwc ? e % g.per_group : e / g.s);
    const int64_t s = kNhwc ? e / g.per_group : e % g.s;
    return load_as_opmath(x[offset_of<kNhwc>(g, n, c, s)]);
  };
  const A pivot = element(0);
  A sum = 0, squares = 0;
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    const A d = element(e) - pivot;
    sum += d;
    squares += d * d;
  }
  sum = block_sum(sum, shared);
  squares = block_sum(squares, shared);
  if (threadIdx.x == 0) {
    const A shift = sum / static_cast<A>(count);
    const A var = max(squares / static_cast<A>(count) - shift * shift, A(0));  // biased, as PyTorch
    mean[blockIdx.x] = pivot + shift;
    rstd[blockIdx.x] = static_cast<A>(1) / sqrt(var + static_cast<A>(eps));
  }
}

// The channel of flat element i, and its (sample, group) row of mean / rstd.
template <bool kNhwc, typename I>
__device__ __forceinline__ void locate(I i, const GroupShape& g, int64_t& c, int64_t& row) {
  I n;
  if constexpr (kNhwc) {
    c = static_cast<int64_t>(i % static_cast<I>(g.c));
    n = i / static_cast<I>(g.c * g.s);
  } else {
    c = static_cast<int64_t>((i / static_cast<I>(g.s)) % static_cast<I>(g.c));
    n = i / static_cast<I>(g.c * g.s);
  }
  row = static_cast<int64_t>(n) * g.groups + c / g.per_group;
}

template <typename T, bool kNhwc, typename I>
__global__ void group_apply_kernel(const T* __restrict__ x, const opmath_t<T>* __restrict__ weight,
                                   const opmath_t<T>* __restrict__ bias, const opmath_t<T>* __restrict__ mean,
                                   const opmath_t<T>* __restrict__ rstd, T* __restrict__ y, GroupShape g,
                                   I total) {
  using A = opmath_t<T>;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    int64_t c, row;
    locate<kNhwc>(i, g, c, row);
    A v = (load_as_opmath(x[i]) - mean[row]) * rstd[row];
    if (weight != nullptr) v *= weight[c];
    if (bias != nullptr) v += bias[c];
    y[i] = store_from<T>(v);
  }
}

// Per (n, c) of group (n, g) = blockIdx.x: dweight_part = rstd * sum(dy (x - mean)) = sum(dy xhat)
// and dbias_part = sum(dy); per group: sums[2 row] = sum(dy w) and sums[2 row + 1]
// = sum(dy w xhat).
template <typename T, bool kNhwc>
__global__ void group_backward_sums_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                           const opmath_t<T>* __restrict__ weight,
                                           const opmath_t<T>* __restrict__ mean,
                                           const opmath_t<T>* __restrict__ rstd, GroupShape g,
                                           opmath_t<T>* __restrict__ dweight_part,
                                           opmath_t<T>* __restrict__ dbias_part,
                                           opmath_t<T>* __restrict__ sums) {
  using A = opmath_t<T>;
  __shared__ A shared[33];
  const int64_t n = blockIdx.x / g.groups, group = blockIdx.x % g.groups;
  const A mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  A dyw = 0, dyw_xhat = 0;  // thread 0's running group sums
  for (int64_t j = 0; j < g.per_group; ++j) {
    const int64_t c = group * g.per_group + j;
    A s_dy = 0, s_dyx = 0;  // sum(dy), sum(dy (x - mean))
    for (int64_t s = threadIdx.x; s < g.s; s += kThreads) {
      const int64_t at = offset_of<kNhwc>(g, n, c, s);
      const A d = load_as_opmath(dy[at]);
      s_dy += d;
      s_dyx += d * (load_as_opmath(x[at]) - mu);  // centred: a large mean costs no digits
    }
    s_dy = block_sum(s_dy, shared);
    s_dyx = block_sum(s_dyx, shared);
    if (threadIdx.x == 0) {
      const A dy_xhat = r * s_dyx;
      dweight_part[n * g.c + c] = dy_xhat;
      dbias_part[n * g.c + c] = s_dy;
      const A w = weight != nullptr ? weight[c] : A(1);
      dyw += w * s_dy;
      dyw_xhat += w * dy_xhat;
    }
  }
  if (threadIdx.x == 0) {
    sums[2 * blockIdx.x] = dyw;
    sums[2 * blockIdx.x + 1] = dyw_xhat;
  }
}

template <typename T, bool kNhwc, typename I>
__global__ void group_input_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                        const opmath_t<T>* __restrict__ weight,
                                        const opmath_t<T>* __restrict__ mean,
                                        const opmath_t<T>* __restrict__ rstd,
                                        const opmath_t<T>* __restrict__ sums, T* __restrict__ dx,
                                        GroupShape g, I total) {
  using A = opmath_t<T>;
  const A inv_count = static_cast<A>(1) / static_cast<A>(g.per_group * g.s);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    int64_t c, row;
    locate<kNhwc>(i, g, c, row);
    const A r = rstd[row];
    const A xhat = (load_as_opmath(x[i]) - mean[row]) * r;
    const A w = weight != nullptr ? weight[c] : A(1);
    const A v =
        r * (load_as_opmath(dy[i]) * w - sums[2 * row] * inv_count - xhat * sums[2 * row + 1] * inv_count);
    dx[i] = store_from<T>(v);
  }
}

GroupShape shape_of(const Tensor& x, int64_t groups) {
  const int64_t n = x.size(0), c = x.size(1);
  return {.n = n, .c = c, .s = x.numel() / (n * c), .groups = groups, .per_group = c / groups};
}

bool is_nhwc(const Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast);
}

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

// Calls fn.template operator()<T, kNhwc, I>() for x's dtype and layout and the narrowest index.
template <typename Fn>
void dispatch_group(const Tensor& x, const char* op, Fn&& fn) {
  // 32-bit indices while a grid-stride step cannot wrap past 2^32.
  const bool nhwc = is_nhwc(x), narrow = x.numel() < (int64_t{1} << 31);
  dispatch_device<TypeSet::Floating>(x.dtype(), op, [&]<typename T>() {
    if (nhwc) {
      narrow ? fn.template operator()<T, true, uint32_t>() : fn.template operator()<T, true, int64_t>();
    } else {
      narrow ? fn.template operator()<T, false, uint32_t>() : fn.template operator()<T, false, int64_t>();
    }
  });
}

}  // namespace

void group_norm_forward(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const GroupShape g = shape_of(x, groups);
  const cudaStream_t stream = stream_for(x);
  dispatch_group(x, "group_norm", [&]<typename T, bool kNhwc, typename I>() {
    using A = opmath_t<T>;
    const auto rows = static_cast<unsigned>(g.n * g.groups);
    group_stats_kernel<T, kNhwc><<<rows, kThreads, 0, stream>>>(static_cast<const T*>(x.data_ptr()), g, eps,
                                                                static_cast<A*>(mean.data_ptr()),
                                                                static_cast<A*>(rstd.data_ptr()));
    NABLA_CUDA_CHECK_LAUNCH();
    group_apply_kernel<T, kNhwc, I><<<blocks_for(x.numel(), 4), kBlockSize, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), data_or_null<A>(weight), data_or_null<A>(bias),
        static_cast<const A*>(mean.data_ptr()), static_cast<const A*>(rstd.data_ptr()),
        static_cast<T*>(y.data_ptr()), g, static_cast<I>(x.numel()));
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void group_norm_backward(const Tensor& dy, const Tensor& x, int64_t groups, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dweight_part,
                         const Tensor& dbias_part) {
  const GroupShape g = shape_of(x, groups);
  const cudaStream_t stream = stream_for(x);
  dispatch_group(x, "group_norm_backward", [&]<typename T, bool kNhwc, typename I>() {
    using A = opmath_t<T>;
    const auto rows = static_cast<unsigned>(g.n * g.groups);
    Tensor sums = Tensor::empty({2 * g.n * g.groups}, {.dtype = mean.dtype(), .device = x.device()});
    group_backward_sums_kernel<T, kNhwc><<<rows, kThreads, 0, stream>>>(
        static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(x.data_ptr()), data_or_null<A>(weight),
        static_cast<const A*>(mean.data_ptr()), static_cast<const A*>(rstd.data_ptr()), g,
        static_cast<A*>(dweight_part.data_ptr()), static_cast<A*>(dbias_part.data_ptr()),
        static_cast<A*>(sums.data_ptr()));
    NABLA_CUDA_CHECK_LAUNCH();
    if (!dx.defined()) return;
    group_input_grad_kernel<T, kNhwc, I><<<blocks_for(x.numel(), 4), kBlockSize, 0, stream>>>(
        static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(x.data_ptr()), data_or_null<A>(weight),
        static_cast<const A*>(mean.data_ptr()), static_cast<const A*>(rstd.data_ptr()),
        static_cast<const A*>(sums.data_ptr()), static_cast<T*>(dx.data_ptr()), g, static_cast<I>(x.numel()));
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
