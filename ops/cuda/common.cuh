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

// The device type for a host storage type.
template <typename T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<Half> {
  using type = __half;
};
template <>
struct DeviceType<BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using device_t = typename DeviceType<T>::type;

// The arithmetic type for a device storage type.
template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<__half> {
  using type = float;
};
template <>
struct AccType<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using acc_t = typename AccType<T>::type;

template <typename T>
__device__ __forceinline__ acc_t<T> load_as_acc(T v) {
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
  nabla::dispatch<Set>(dtype, op, [&]<typename T>() { fn.template operator()<device_t<T>>(); });
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
