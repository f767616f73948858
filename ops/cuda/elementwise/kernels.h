// Internal. CUDA kernel entry points for the elementwise family, in plain C++ so front ends
// compile without nvcc. Same contracts as ops/cpu/kernels.h: the front end validates, picks the
// dtype and allocates the output; kernels run on the current stream of the tensors' device and
// never synchronize.
#pragma once

#include <vector>

#include "nabla/core/generator.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/detail/op_kinds.h"

namespace nabla::ops::cuda {

void fill(const Tensor& out, double value);
void copy(const Tensor& src, const Tensor& dst);  // same device; casts and strides; src broadcasts
void arange(const Tensor& out, double start, double step);
void uniform(const Tensor& out, PhiloxState state, double low, double high);
void normal(const Tensor& out, PhiloxState state, double mean, double stddev);
void randint(const Tensor& out, PhiloxState state, int64_t low, int64_t high);
// out = 1 where the element's uniform draw is below p, else 0 (any dtype; bool gives true/false).
void bernoulli(const Tensor& out, PhiloxState state, double p);
void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams params);
// a and b share one dtype, or are a pair that is_mixed_float_pair takes (out float32).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

// One device-to-device copy of copy_bytes_many.
struct ByteCopy {
  void* dst;
  const void* src;
  size_t bytes;
};
// All the copies (on one device, none overlapping another) in one kernel launch per 120.
void copy_bytes_many(const std::vector<ByteCopy>& copies, int device);

}  // namespace nabla::ops::cuda
