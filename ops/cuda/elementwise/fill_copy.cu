// CUDA kernels that write values without reading math inputs: fill, copy (any strides, any of
// the 8 dtypes to any other, broadcasting sources) and arange. fill and copy go through the
// shared elementwise launcher; conversions follow ops/cpu/fill_copy.cpp (through the
// destination's arithmetic type; anything to bool is "!= 0").
#include <cstring>

#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/elementwise/kernels.h"

namespace nabla::ops::cuda {

namespace {

template <typename U>
struct Constant {
  U value;
  __device__ __forceinline__ U operator()() const { return value; }
};

template <typename U>
struct Identity {
  __device__ __forceinline__ U operator()(U x) const { return x; }
};

template <typename Out, typename In>
struct Cast {
  __device__ __forceinline__ Out operator()(In raw) const {
    auto v = load_as_opmath(raw);
    if constexpr (std::is_same_v<Out, bool>) {
      return v != decltype(v)(0);
    } else {
      return store_from<Out>(static_cast<opmath_t<Out>>(v));
    }
  }
};

// out[i * stride] = start + step * i, in double without FMA contraction (as the CPU computes
// it), then converted through T's arithmetic type.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    arange_kernel(T* out, int64_t n, int64_t stride, double start, double step) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += grid) {
    double v = __dadd_rn(start, __dmul_rn(step, static_cast<double>(i)));
    out[i * stride] = store_from<T>(static_cast<opmath_t<T>>(v));
  }
}

}  // namespace

void fill(const Tensor& out, double value) {
  if (out.numel() == 0) return;
  // The value in out's dtype, converted on the host exactly as the CPU kernel converts it.
  uint64_t bits = 0;
  dispatch(out.dtype(), "fill", [&]<typename T>() {
    const T v = static_cast<T>(static_cast<compute_t<T>>(value));
    std::memcpy(&bits, &v, sizeof(T));
  });
  if (bits == 0 && is_non_overlapping_and_dense(out.sizes(), out.strides())) {
    // Zeros over a dense block (zero_(), zeros()): a memset is the cheapest write there is.
    DeviceScope device(out.device().index);
    NABLA_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream_for(out)));
    return;
  }
  dispatch_bits(out.itemsize(), [&]<typename U>() {
    U v;
    std::memcpy(&v, &bits, sizeof(U));
    launch_elementwise<U>(out, {}, Constant<U>{v});
  });
}

void copy(const Tensor& src, const Tensor& dst) {
  NABLA_ASSERT(src.device() == dst.device(), "cuda::copy: {} and {} are on different devices", describe(src),
               describe(dst));
  if (src.dtype() == dst.dtype()) {
    dispatch_bits(dst.itemsize(),
                  [&]<typename U>() { launch_elementwise<U, U>(dst, {&src}, Identity<U>{}); });
    return;
  }
  dispatch_device(dst.dtype(), "copy", [&]<typename Out>() {
    dispatch_device(src.dtype(), "copy", [&]<typename In>() {
      if constexpr (!std::is_same_v<Out, In>) launch_elementwise<Out, In>(dst, {&src}, Cast<Out, In>{});
    });
  });
}

void arange(const Tensor& out, double start, double step) {
  NABLA_ASSERT(out.dim() <= 1, "cuda::arange: expected a 1-d output, got {}", describe(out));
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t stride = out.dim() == 1 ? out.stride(0) : 1;
  dispatch_device<TypeSet::FloatingAndIntegral>(out.dtype(), "arange", [&]<typename T>() {
    DeviceScope device(out.device().index);
    arange_kernel<T><<<blocks_for(n), kBlockSize, 0, stream_for(out)>>>(static_cast<T*>(out.data_ptr()), n,
                                                                        stride, start, step);
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
