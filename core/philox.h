// Public header. Philox4x32-10, a counter-based random number generator (Salmon et al., 2011).
//
// Counter-based means element i of a random tensor is a pure function of (seed, offset + i), so
// CPU threads and CUDA threads draw the same numbers in any order, and a replayed CUDA graph
// draws new numbers just by advancing the offset. Compiles for host and device.
#pragma once

#include <cstdint>

#include "nabla/core/host_device.h"

namespace nabla::philox {

struct Block {
  uint32_t v[4];
};

NABLA_HOST_DEVICE uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on `counter` under the 64-bit key `seed`.
NABLA_HOST_DEVICE Block philox4x32_10(uint64_t counter, uint64_t seed) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(kMul0, c0, &hi0);
    uint32_t lo1 = mulhilo(kMul1, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
NABLA_HOST_DEVICE float to_uniform_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}
// Uniform in [0, 1) with 53 random bits.
NABLA_HOST_DEVICE double to_uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace nabla::philox
