// Internal (ops/cuda only). What every CUDA kernel file shares: device element types, the
// dtype dispatch for kernels, the launch-grid helper and the current stream.
//
// Storage types on the device are __half and __nv_bfloat16; arithmetic runs in `Acc<T>` (float
// for the 16-bit types, T otherwise) and rounds on store, matching the CPU backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/dtype.h"
#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

// The CUDA type that stores a nabla dtype's elements: __half for Half, __nv_bfloat16 for
// BFloat16, the type itself otherwise.
template <typename T>
struct CudaScalar {
  using type = T;
};
template <>
struct CudaScalar<Half> {
  using type = __half;
};
template <>
struct CudaScalar<BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using cuda_scalar_t = typename CudaScalar<T>::type;

// The type arithmetic on a stored CUDA type runs in (PyTorch calls it opmath): float for __half and
// __nv_bfloat16, which are loaded, computed in float and rounded once on store; the type itself
// otherwise, so float32 math runs in float and float64 in double. nabla::compute_t (core/dtype.h)
// is the host's counterpart. Reductions accumulate in it too, so a float32 sum on the GPU adds in
// float, where the CPU adds in double (reduce_acc_t in ops/cpu/reduce.cpp).
template <typename T>
struct OpMathType {
  using type = T;
};
template <>
struct OpMathType<__half> {
  using type = float;
};
template <>
struct OpMathType<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMathType<T>::type;

template <typename T>
__device__ __forceinline__ opmath_t<T> load_as_opmath(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <typename T, typename A>
__device__ __forceinline__ T store_from(A v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Calls fn.template operator()<DeviceT>() for `dtype`, filtered like nabla::dispatch.
template <TypeSet Set = TypeSet::All, typename Fn>
void dispatch_device(DType dtype, const char* op, Fn&& fn) {
  nabla::dispatch<Set>(dtype, op, [&]<typename T>() { fn.template operator()<cuda_scalar_t<T>>(); });
}

inline constexpr int kBlockSize = 256;

// Blocks for n elements at `per_thread` elements per thread, capped so huge tensors use a
// grid-stride loop instead of an enormous grid.
inline unsigned blocks_for(int64_t n, int per_thread = 1) {
  int64_t blocks = (n + int64_t{kBlockSize} * per_thread - 1) / (int64_t{kBlockSize} * per_thread);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// The thread's current stream on the tensor's device, as a cudaStream_t.
inline cudaStream_t stream_for(const Tensor& t) {
  return static_cast<cudaStream_t>(nabla::cuda::current_stream(t.device().index).handle());
}

}  // namespace nabla::ops::cuda
