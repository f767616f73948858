// Internal (data/cuda). The float-to-training-dtype store both image kernels end with (the
// normalize kernel and the GPU decoder's resample kernel): round to nearest, as the CPU path's
// casts do.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace nabla::data::cuda {

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

}  // namespace nabla::data::cuda
