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

// ---- Four neighbouring elements at once (Note [Vectorized fused kernels] in codegen.cpp) --------
// i is a multiple of 4 and p aligned as aligned() checked, so each is one 4-, 8- or 16-byte access.

__device__ __forceinline__ bool aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

__device__ __forceinline__ void ld4_f32(const void* p, long long i, float (&v)[4]) {
  const float4 t = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
  v[0] = t.x;
  v[1] = t.y;
  v[2] = t.z;
  v[3] = t.w;
}
__device__ __forceinline__ void ld4_f64(const void* p, long long i, double (&v)[4]) {
  const double2 a = *reinterpret_cast<const double2*>(static_cast<const double*>(p) + i);
  const double2 b = *reinterpret_cast<const double2*>(static_cast<const double*>(p) + i + 2);
  v[0] = a.x;
  v[1] = a.y;
  v[2] = b.x;
  v[3] = b.y;
}
__device__ __forceinline__ void ld4_b8(const void* p, long long i, bool (&v)[4]) {
  const unsigned t = *reinterpret_cast<const unsigned*>(static_cast<const unsigned char*>(p) + i);
  for (int j = 0; j < 4; ++j) v[j] = ((t >> (8 * j)) & 0xffu) != 0;
}
__device__ __forceinline__ void ld4_f16(const void* p, long long i, float (&v)[4]) {
  const uint2 t = *reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(p) + i);
  const unsigned short h[4] = {
      static_cast<unsigned short>(t.x & 0xffffu), static_cast<unsigned short>(t.x >> 16),
      static_cast<unsigned short>(t.y & 0xffffu), static_cast<unsigned short>(t.y >> 16)};
  for (int j = 0; j < 4; ++j) asm("cvt.f32.f16 %0, %1;" : "=f"(v[j]) : "h"(h[j]));
}
__device__ __forceinline__ void ld4_bf16(const void* p, long long i, float (&v)[4]) {
  const uint2 t = *reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(p) + i);
  v[0] = __uint_as_float(t.x << 16);
  v[1] = __uint_as_float(t.x & 0xffff0000u);
  v[2] = __uint_as_float(t.y << 16);
  v[3] = __uint_as_float(t.y & 0xffff0000u);
}

__device__ __forceinline__ void st4_f32(void* p, long long i, const float (&v)[4]) {
  *reinterpret_cast<float4*>(static_cast<float*>(p) + i) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void st4_f64(void* p, long long i, const double (&v)[4]) {
  *reinterpret_cast<double2*>(static_cast<double*>(p) + i) = make_double2(v[0], v[1]);
  *reinterpret_cast<double2*>(static_cast<double*>(p) + i + 2) = make_double2(v[2], v[3]);
}
__device__ __forceinline__ void st4_b8(void* p, long long i, const bool (&v)[4]) {
  unsigned t = 0;
  for (int j = 0; j < 4; ++j) t |= (v[j] ? 1u : 0u) << (8 * j);
  *reinterpret_cast<unsigned*>(static_cast<unsigned char*>(p) + i) = t;
}
__device__ __forceinline__ void st4_f16(void* p, long long i, const float (&v)[4]) {
  const unsigned a = to_f16_bits(v[0]) | (static_cast<unsigned>(to_f16_bits(v[1])) << 16);
  const unsigned b = to_f16_bits(v[2]) | (static_cast<unsigned>(to_f16_bits(v[3])) << 16);
  *reinterpret_cast<uint2*>(static_cast<unsigned short*>(p) + i) = make_uint2(a, b);
}
__device__ __forceinline__ void st4_bf16(void* p, long long i, const float (&v)[4]) {
  const unsigned a = to_bf16_bits(v[0]) | (static_cast<unsigned>(to_bf16_bits(v[1])) << 16);
  const unsigned b = to_bf16_bits(v[2]) | (static_cast<unsigned>(to_bf16_bits(v[3])) << 16);
  *reinterpret_cast<uint2*>(static_cast<unsigned short*>(p) + i) = make_uint2(a, b);
}

}  // namespace nabla_fusion
