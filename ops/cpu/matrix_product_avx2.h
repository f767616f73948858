// Internal (ops/cpu/matrix_product*.cpp). The AVX2 + FMA build of the Eigen product (Note [Eigen
// for AVX2] in matrix_product.h). Plain pointers and integers only: this header is included by
// a file compiled with -mavx2, and any inline function it defined could be picked by the linker
// for baseline code too.
#pragma once

#include <cstdint>

namespace nabla::ops::cpu::avx2 {

// Whether this build has the AVX2 copy and the CPU it runs on has AVX2 and FMA.
bool usable();

// c (rows, cols, row-major, ldc) = or += a (rows, depth) @ b (depth, cols), each with its leading
// dimension and storage order. Only when usable().
void product(const float* a, int64_t lda, bool a_row_major, const float* b, int64_t ldb, bool b_row_major,
             float* c, int64_t ldc, int64_t rows, int64_t cols, int64_t depth, bool accumulate);
void product(const double* a, int64_t lda, bool a_row_major, const double* b, int64_t ldb, bool b_row_major,
             double* c, int64_t ldc, int64_t rows, int64_t cols, int64_t depth, bool accumulate);

}  // namespace nabla::ops::cpu::avx2
