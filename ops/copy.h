// Public header. Copies between dtypes, devices and layouts, with autograd.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla {

// A copy on `device` in `dtype` (the tensor itself when nothing changes). Keeps channels_last.
Tensor to(const Tensor& x, Device device, DType dtype);
Tensor clone(const Tensor& x, MemoryFormat format = MemoryFormat::Preserve);
// Copies src (broadcast to dst's shape, converted to dst's dtype, from any device) into dst.
Tensor& copy_(Tensor& dst, const Tensor& src);
// dsts[i].copy_(srcs[i]) for each i, without autograd (for gradient and state buffers; no dst may
// require grad). On CUDA the pairs of one dtype and one dense layout (equal sizes and strides) on
// one device go in a single kernel launch, not one copy each: many small copies cost their
// launches, not their bytes. The others are copied one by one.
void copy_many(const TensorList& dsts, const TensorList& srcs);

namespace debug {

// Layout conversions: a dense 4-d tensor copied from one memory format into the other (NCHW to
// NHWC or back) by contiguous(), clone() or copy_(). Counted process-wide, so a test can check
// that a channels_last model keeps NHWC through a whole step:
//
//   nabla::debug::reset_layout_conversions();
//   ... forward, backward ...
//   EXPECT_EQ(nabla::debug::layout_conversions().total, 0);
//
// cpu_conv_staging is the part of `total` made inside the CPU convolution, whose im2col kernels
// are NCHW only: there a channels_last input is read through an NCHW copy and the result turned
// back (CUDA's cuDNN path runs NHWC and makes none).
struct LayoutConversions {
  int64_t total = 0;
  int64_t cpu_conv_staging = 0;
};
LayoutConversions layout_conversions();
void reset_layout_conversions();

// Internal (ops/conv.cpp): conversions on this thread count as CPU conv staging while it lives.
class CpuConvStagingScope {
 public:
  CpuConvStagingScope();
  ~CpuConvStagingScope();
  CpuConvStagingScope(const CpuConvStagingScope&) = delete;
  CpuConvStagingScope& operator=(const CpuConvStagingScope&) = delete;

 private:
  bool previous_;
};

}  // namespace debug

}  // namespace nabla
