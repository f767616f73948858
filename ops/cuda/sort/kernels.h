// Internal. CUDA entry points (plain C++) of the row-wise ops: sort (stable, NaN largest) and the cumulative
// sum, over the rows of contiguous (rows, n) matrices. The front ends (ops/sort.cpp,
// ops/cumsum.cpp) move the dim last, validate and allocate; these only compute.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

// On the current stream of x's device; no host synchronization. Sorting takes CUB's scratch
// memory from the caching allocator.

// values (rows, n) of x's dtype and indices (rows, n) int64: each row of x sorted, stably.
void sort_rows(const Tensor& x, bool descending, const Tensor& values, const Tensor& indices);

// out (rows, n): the running sum along each row of x (from the row's end when reverse).
// Floating types add in float or wider (double on the CPU; float for 16-bit and float32 types on
// CUDA, double for float64), integers and bool in
// int64; out has x's dtype, or int64 for integer and bool x.
void cumsum_rows(const Tensor& x, bool reverse, const Tensor& out);

}  // namespace nabla::ops::cuda
