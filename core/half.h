// Public header. float16 and bfloat16 as CPU storage types.
//
// On the CPU these are storage formats only: kernels load them as float, compute in float and
// round back on store (round-to-nearest-even), as PyTorch's CPU backend does.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace nabla {

namespace detail {
inline uint32_t float_bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
inline float bits_float(uint32_t u) {
  return std::bit_cast<float>(u);
}

inline uint16_t float_to_half_bits(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                  // subnormal half (or zero): let the FPU round via a magic add
    float magic = bits_float(0x3f000000u);  // 0.5: shifts the mantissa into place
    float r = bits_float(abs) + magic;
    return static_cast<uint16_t>(sign | (float_bits(r) - float_bits(magic)));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    // Subnormal: value = mant * 2^-24, exact in float.
    float v = static_cast<float>(mant) * bits_float(0x33800000u);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}
}  // namespace detail

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like a built-in float type
  operator float() const { return detail::half_bits_to_float(bits); }  // NOLINT
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}                            // NOLINT
  operator float() const { return detail::bits_float(static_cast<uint32_t>(bits) << 16); }  // NOLINT
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace nabla
