// The GPU decoder's resample + normalize kernel (resample_cuda.h). One thread per output pixel,
// its three channels together: the four source pixels' bytes are adjacent. Compiled with
// --fmad=false (data/CMakeLists.txt), so the blends round as the CPU resampler's do and a pixel
// decoded alike comes out as the same byte.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/error.h"
#include "nabla/data/cuda/resample_cuda.h"
#include "nabla/data/cuda/store.cuh"

namespace nabla::data::cuda {

namespace {

constexpr int kBlockSize = 256;
constexpr int kChannels = 3;

template <typename T, bool kChannelsLast>
__global__ void resample_normalize_kernel(const ResampleSource* __restrict__ sources,
                                          const detail::Tap* __restrict__ taps, int64_t n, int32_t size,
                                          T* __restrict__ dst, NormalizeCoefficients k) {
  const int64_t pixels = int64_t{size} * size;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; o < n * pixels; o += stride) {
    const int64_t image = o / pixels;
    const auto p = static_cast<int32_t>(o - image * pixels);
    const int32_t oy = p / size, ox = p - oy * size;
    const ResampleSource s = sources[image];
    const detail::Tap ty = taps[s.taps + oy];
    const detail::Tap tx = taps[s.taps + size + (s.flip ? size - 1 - ox : ox)];
    const uint8_t* upper = s.pixels + int64_t{ty.i0} * s.pitch;
    const uint8_t* lower = s.pixels + int64_t{ty.i1} * s.pitch;
    const int32_t x0 = tx.i0 * kChannels, x1 = tx.i1 * kChannels;
#pragma unroll
    for (int c = 0; c < kChannels; ++c) {
      const float top = detail::bilinear_blend(upper[x0 + c], upper[x1 + c], tx.w1);
      const float bottom = detail::bilinear_blend(lower[x0 + c], lower[x1 + c], tx.w1);
      const float byte = detail::round_to_byte(detail::bilinear_blend(top, bottom, ty.w1));
      const T value = from_float<T>(__fmaf_rn(byte, k.scale[c], k.bias[c]));
      if constexpr (kChannelsLast) {
        dst[o * kChannels + c] = value;
      } else {
        dst[(image * kChannels + c) * pixels + p] = value;
      }
    }
  }
}

template <typename T>
void launch_typed(const ResampleSource* sources, const detail::Tap* taps, int64_t n, int32_t size, void* dst,
                  bool channels_last, const NormalizeCoefficients& k, cudaStream_t stream) {
  const int64_t total = n * size * size;
  const int64_t blocks = (total + kBlockSize - 1) / kBlockSize;
  const auto grid = static_cast<unsigned>(blocks > 65535 * 8 ? 65535 * 8 : blocks);
  if (channels_last) {
    resample_normalize_kernel<T, true>
        <<<grid, kBlockSize, 0, stream>>>(sources, taps, n, size, static_cast<T*>(dst), k);
  } else {
    resample_normalize_kernel<T, false>
        <<<grid, kBlockSize, 0, stream>>>(sources, taps, n, size, static_cast<T*>(dst), k);
  }
  NABLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_resample_normalize(const ResampleSource* sources, const detail::Tap* taps, int64_t n,
                               int64_t size, void* dst, DType dtype, bool channels_last,
                               const NormalizeCoefficients& k, nabla::cuda::Stream stream) {
  if (n == 0 || size == 0) return;
  NABLA_CHECK(size <= 65535, "GPU decode: an output side of {} is above 65535", size);
  nabla::cuda::DeviceGuard guard(stream.device());
  auto s = static_cast<cudaStream_t>(stream.handle());
  const auto side = static_cast<int32_t>(size);
  switch (dtype) {
    case DType::Float32:
      launch_typed<float>(sources, taps, n, side, dst, channels_last, k, s);
      break;
    case DType::Float16:
      launch_typed<__half>(sources, taps, n, side, dst, channels_last, k, s);
      break;
    case DType::BFloat16:
      launch_typed<__nv_bfloat16>(sources, taps, n, side, dst, channels_last, k, s);
      break;
    default:
      NABLA_CHECK(false, "GPU decode: output dtype must be float32, float16 or bfloat16, got {}",
                  dtype_name(dtype));
  }
}

}  // namespace nabla::data::cuda
