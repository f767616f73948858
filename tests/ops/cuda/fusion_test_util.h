// Helpers of the step compiler's CUDA tests (fusion_test.cpp, fusion_views_test.cpp).
#pragma once

#include <cstring>
#include <string>
#include <tuple>

#include "nabla/nabla.h"
#include "nabla/ops/cuda/fusion/nvrtc.h"
#include "nabla/ops/fusion.h"
#include "parity_util.h"

namespace nabla::testing {

#define SKIP_WITHOUT_NVRTC()                                                                         \
  if (const std::string& why = ::nabla::ops::cuda::fusion::nvrtc_unavailable_reason(); !why.empty()) \
  GTEST_SKIP() << why

// Fresh random values (of a float32 draw) on the GPU, in dtype and format.
inline Tensor random_cuda(const Shape& sizes, DType dtype, uint64_t seed,
                          MemoryFormat format = MemoryFormat::Contiguous) {
  Tensor x = random_values(sizes, seed, kFloat32);
  return x.to(Device::cuda()).to(dtype).contiguous(format);
}

// Whether two tensors hold the same bytes (laid out contiguously).
inline bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Runs f once eagerly and once inside a FusionScope on the same inputs; returns both results and
// the scope's counts.
template <class F>
std::tuple<TensorList, TensorList, FusionStats> eager_and_fused(F f) {
  TensorList eager = f();
  FusionStats stats;
  TensorList fused;
  {
    FusionScope scope;
    fused = f();
    scope.flush();
    stats = scope.stats();
  }
  return {eager, fused, stats};
}

}  // namespace nabla::testing
