// The fused normalize kernel (see data/normalize.h): uint8 NHWC in, (x/255 - mean)/std as one
// fma per element, cast to the training dtype, NCHW or NHWC out. One thread per output element,
// so writes are coalesced in either layout; reads of the 1-byte input are small and cached.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/error.h"
#include "nabla/data/cuda/normalize_cuda.h"
#include "nabla/data/cuda/store.cuh"

namespace nabla::data::cuda {

namespace {

constexpr int kBlockSize = 256;

template <typename T, bool kChannelsLast>
__global__ void normalize_kernel(const uint8_t* __restrict__ src, T* __restrict__ dst, int64_t total,
                                 int64_t hw, int64_t c, NormalizeCoefficients k) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; o < total; o += stride) {
    int64_t channel, in;
    if constexpr (kChannelsLast) {
      channel = o % c;  // output storage is NHWC, like the input
      in = o;
    } else {
      int64_t pixel = o % hw;  // output storage is NCHW: o = (n * C + channel) * HW + pixel
      int64_t nc = o / hw;
      channel = nc % c;
      in = ((nc / c) * hw + pixel) * c + channel;
    }
    float x = static_cast<float>(src[in]);
    dst[o] = from_float<T>(__fmaf_rn(x, k.scale[channel], k.bias[channel]));
  }
}

template <typename T>
void launch_typed(const uint8_t* src, void* dst, int64_t total, int64_t hw, int64_t c, bool channels_last,
                  const NormalizeCoefficients& k, cudaStream_t stream) {
  int64_t blocks = (total + kBlockSize - 1) / kBlockSize;
  auto grid = static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
  if (channels_last) {
    normalize_kernel<T, true><<<grid, kBlockSize, 0, stream>>>(src, static_cast<T*>(dst), total, hw, c, k);
  } else {
    normalize_kernel<T, false><<<grid, kBlockSize, 0, stream>>>(src, static_cast<T*>(dst), total, hw, c, k);
  }
  NABLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_normalize(const uint8_t* src, void* dst, int64_t n, int64_t h, int64_t w, int64_t c, DType dtype,
                      bool channels_last, const NormalizeCoefficients& coefficients,
                      nabla::cuda::Stream stream) {
  const int64_t total = n * h * w * c;
  if (total == 0) return;
  // A launch goes to the current device; the stream may belong to another one.
  nabla::cuda::DeviceGuard guard(stream.device());
  auto s = static_cast<cudaStream_t>(stream.handle());
  switch (dtype) {
    case DType::Float32:
      launch_typed<float>(src, dst, total, h * w, c, channels_last, coefficients, s);
      break;
    case DType::Float16:
      launch_typed<__half>(src, dst, total, h * w, c, channels_last, coefficients, s);
      break;
    case DType::BFloat16:
      launch_typed<__nv_bfloat16>(src, dst, total, h * w, c, channels_last, coefficients, s);
      break;
    default:
      NABLA_CHECK(false, "normalize_images: output dtype must be float32, float16 or bfloat16, got {}",
                  dtype_name(dtype));
  }
}

}  // namespace nabla::data::cuda
