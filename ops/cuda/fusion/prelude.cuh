// Internal (ops/cuda/fusion). The header every generated kernel includes (fusion::kPreludeName),
// compiled by NVRTC at run time, never by nvcc: the build embeds its text, with the formula
// headers it includes, into the library (ops/CMakeLists.txt), so the kernels are compiled from
// the sources the library itself was built from (Note [Generated kernels] in
// ops/fusion/codegen.cpp). NVRTC has no standard library: ops/cuda/fusion/nvrtc.cpp hands it the
// few declarations the formulas use under the standard headers' names.
#pragma once

#include "nabla/ops/detail/elementwise_formulas.h"

namespace nabla_fusion {

using namespace nabla::ops;
using namespace nabla::ops::formula;

// The kernel's one parameter: the operands' base pointers, outputs first.
template <int K>
struct Pointers {
  void* p[K];
};

// Loads give the arithmetic type (float for the 16-bit floats), as load_as_opmath does for the
// eager kernels; the conversions are the instructions cuda_fp16.h and cuda_bf16.h use.
__device__ __forceinline__ float ld_f32(const void* p, long long i) {
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ double ld_f64(const void* p, long long i) {
  return static_cast<const double*>(p)[i];
}
__device__ __forceinline__ bool ld_b8(const void* p, long long i) {
  return static_cast<const unsigned char*>(p)[i] != 0;
}
__device__ __forceinline__ float ld_f16(const void* p, long long i) {
  const unsigned short h = static_cast<const unsigned short*>(p)[i];
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float ld_bf16(const void* p, long long i) {
  const unsigned short b = static_cast<const unsigned short*>(p)[i];
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}

// Round to nearest even, as __float2half_rn and __float2bfloat16_rn do.
__device__ __forceinline__ unsigned short to_f16_bits(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ unsigned short to_bf16_bits(float f) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
}

__device__ __forceinline__ void st_f32(void* p, long long i, float v) {
  static_cast<float*>(p)[i] = v;
}
__device__ __forceinline__ void st_f64(void* p, long long i, double v) {
  static_cast<double*>(p)[i] = v;
}
__device__ __forceinline__ void st_b8(void* p, long long i, bool v) {
  static_cast<unsigned char*>(p)[i] = v ? 1 : 0;
}
__device__ __forceinline__ void st_f16(void* p, long long i, float v) {
  static_cast<unsigned short*>(p)[i] = to_f16_bits(v);
}
__device__ __forceinline__ void st_bf16(void* p, long long i, float v) {
  static_cast<unsigned short*>(p)[i] = to_bf16_bits(v);
}

// A 16-bit value as eager mode reads it back after storing it.
__device__ __forceinline__ float rnd_f16(float v) {
  const unsigned short h = to_f16_bits(v);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float rnd_bf16(float v) {
  return __uint_as_float(static_cast<unsigned>(to_bf16_bits(v)) << 16);
}

// A value the compiler must take as it is: no FMA across ops (Note [Generated kernels]).
__device__ __forceinline__ void keep(float& v) {
  asm volatile("" : "+f"(v));
}
__device__ __forceinline__ void keep(double& v) {
  asm volatile("" : "+d"(v));
}

}  // namespace nabla_fusion
