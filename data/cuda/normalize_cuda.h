// Internal (data/ only). The launcher of the fused normalize kernel, callable from plain C++.
// Reached only through nabla::dispatch (data/normalize.cpp), so a build without CUDA needs no definition.
#pragma once

#include <cstdint>

#include "nabla/core/cuda/stream.h"
#include "nabla/core/dtype.h"
#include "nabla/data/normalize.h"

namespace nabla::data::cuda {

// src: (N, H, W, C) uint8 on the device; dst: N*C*H*W elements of `dtype`, NCHW or NHWC storage.
void launch_normalize(const uint8_t* src, void* dst, int64_t n, int64_t h, int64_t w, int64_t c, DType dtype,
                      bool channels_last, const NormalizeCoefficients& coefficients,
                      nabla::cuda::Stream stream);

}  // namespace nabla::data::cuda
