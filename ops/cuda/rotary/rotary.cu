// The CUDA backend of the rotary-embedding seam (ops/detail/rotary.h): one thread per pair, in a
// grid-stride loop; neighbouring threads take neighbouring pairs of a row, so the loads of a warp
// are contiguous (two runs of D/2 elements in the halves layout). Memory-bound: it reads x and
// the table rows once and writes out once, where the composition with narrow, four products and
// cat writes the halves' products and copies them again.
#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/detail/rotary.h"

namespace nabla::ops::cuda {

namespace {

struct RowGeometry {
  int dims = 0;  // the row dims: every dim but the last
  int64_t sizes[RotaryCall::kMaxDims] = {};
  int64_t x_strides[RotaryCall::kMaxDims] = {};
  int64_t out_strides[RotaryCall::kMaxDims] = {};
  int64_t x_col = 1, out_col = 1;  // the strides of the last dim
};

template <typename T, typename Table>
__global__ void rotary_kernel(const T* __restrict__ x, T* __restrict__ out, const Table* __restrict__ cos,
                              const Table* __restrict__ sin, RowGeometry g, int64_t pairs, int64_t half,
                              int64_t offset, bool interleaved, bool inverse) {
  using C = opmath_t<T>;
  for (int64_t n = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; n < pairs;
       n += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = n % half;
    int64_t rest = n / half, x_at = 0, out_at = 0, t = 0;
    for (int d = g.dims - 1; d >= 0; --d) {
      const int64_t k = rest % g.sizes[d];
      rest /= g.sizes[d];
      if (d == g.dims - 1) t = k;
      x_at += k * g.x_strides[d];
      out_at += k * g.out_strides[d];
    }
    const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const int64_t angle = (offset + t) * half + i;
    const C s = static_cast<C>(sin[angle]);
    C ya, yb;
    rotate_pair<C>(load_as_opmath(x[x_at + ia * g.x_col]), load_as_opmath(x[x_at + ib * g.x_col]),
                   static_cast<C>(cos[angle]), inverse ? -s : s, ya, yb);
    out[out_at + ia * g.out_col] = store_from<T>(ya);
    out[out_at + ib * g.out_col] = store_from<T>(yb);
  }
}

void rotate(const RotaryCall& c) {
  const Tensor& x = c.x;
  const int64_t half = x.size(-1) / 2, pairs = x.numel() / 2;
  if (pairs == 0) return;
  NABLA_ASSERT(x.dim() <= RotaryCall::kMaxDims, "rotary_embedding: at most {} dims", RotaryCall::kMaxDims);
  RowGeometry g;
  g.dims = static_cast<int>(x.dim() - 1);
  for (int d = 0; d < g.dims; ++d) {
    g.sizes[d] = x.size(d);
    g.x_strides[d] = x.stride(d);
    g.out_strides[d] = c.out.stride(d);
  }
  g.x_col = x.stride(-1);
  g.out_col = c.out.stride(-1);
  nabla::cuda::DeviceGuard device(x.device().index);
  const cudaStream_t stream = stream_for(x);
  dispatch_device<TypeSet::Floating>(x.dtype(), "rotary_embedding", [&]<typename T>() {
    using Table = std::conditional_t<std::is_same_v<T, double>, double, float>;
    rotary_kernel<T, Table><<<blocks_for(pairs), kBlockSize, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(c.out.data_ptr()),
        static_cast<const Table*>(c.cos.data_ptr()), static_cast<const Table*>(c.sin.data_ptr()), g, pairs,
        half, c.offset, c.interleaved, c.inverse);
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

const RotaryKernels kRotaryKernels{.rotate = rotate};

}  // namespace nabla::ops::cuda
