// Internal. The rotary-embedding family's backend seam (Note [Backend seams] in
// docs/design/routes.md) and its one formula, shared by the CPU loop (ops/cpu/rotary.cpp) and the
// CUDA kernel (ops/cuda/rotary/rotary.cu). The front end (ops/rotary.cpp) builds the tables,
// allocates the output and records the autograd node.
#pragma once

#include <cstdint>
#include <utility>

#include "nabla/core/host_device.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/detail/dispatch.h"

namespace nabla::ops {

// Rotates the pair (a, b) by the angle whose cosine and sine are c and s: (a c - b s, b c + a s).
// The backward is the same rotation by minus the angle (s negated): the rotation's transpose.
template <typename C>
NABLA_HOST_DEVICE void rotate_pair(C a, C b, C c, C s, C& out_a, C& out_b) {
  out_a = a * c - b * s;
  out_b = b * c + a * s;
}

// One rotation: out = x rotated, row by row. x and out are (..., T, D) with D even and the same
// sizes, any strides (at most kMaxDims dims); the row at index t along dim -2 is at position
// offset + t, whose angles are row offset + t of cos and sin (P, D/2), contiguous, float32 for
// 16-bit and float32 x, float64 for float64 x. Pairs are (i, i + D/2), or (2i, 2i + 1) when
// interleaved. inverse: rotate by minus the angles (the gradient).
struct RotaryCall {
  static constexpr int kMaxDims = 8;
  Tensor x, out, cos, sin;
  int64_t offset = 0;
  bool interleaved = false;
  bool inverse = false;
};

struct RotaryKernels {
  void (*rotate)(const RotaryCall& call);
};

namespace cpu {
extern const RotaryKernels kRotaryKernels;  // ops/cpu/rotary.cpp
}
namespace cuda {
extern const RotaryKernels kRotaryKernels;  // ops/cuda/rotary/rotary.cu (CUDA builds only)
}

template <class Call>
decltype(auto) on_rotary(const char* op, const Tensor& on, Call&& call) {
  return on_backend<cpu::kRotaryKernels, cuda::kRotaryKernels>(op, on, std::forward<Call>(call));
}

}  // namespace nabla::ops
