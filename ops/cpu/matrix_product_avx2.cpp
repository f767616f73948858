// Eigen's matrix product compiled with -mavx2 -mfma (ops/CMakeLists.txt sets the flags on this
// file alone, on x86-64), chosen at run time by matrix_product.cpp (Note [Eigen for AVX2] in
// matrix_product.h).
//
// Everything this file instantiates is either in an anonymous namespace or in Eigen, which is
// renamed here: a template emitted by both this file and a baseline one under one name could
// resolve to this copy and execute AVX2 instructions on a CPU without them. So it includes no
// nabla header with inline code, only the plain declarations of matrix_product_avx2.h.
#include "nabla/ops/cpu/matrix_product_avx2.h"

#if defined(__AVX2__) && defined(__FMA__)

#define EIGEN_DONT_PARALLELIZE
#define Eigen nabla_eigen_avx2
#include <Eigen/Core>

namespace nabla::ops::cpu::avx2 {

namespace {
#include "nabla/ops/cpu/matrix_product_eigen.inc"
}  // namespace

bool usable() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

void product(const float* a, int64_t lda, bool a_row_major, const float* b, int64_t ldb, bool b_row_major,
             float* c, int64_t ldc, int64_t rows, int64_t cols, int64_t depth, bool accumulate) {
  eigen_product(a, lda, a_row_major, b, ldb, b_row_major, c, ldc, rows, cols, depth, accumulate);
}

void product(const double* a, int64_t lda, bool a_row_major, const double* b, int64_t ldb, bool b_row_major,
             double* c, int64_t ldc, int64_t rows, int64_t cols, int64_t depth, bool accumulate) {
  eigen_product(a, lda, a_row_major, b, ldb, b_row_major, c, ldc, rows, cols, depth, accumulate);
}

}  // namespace nabla::ops::cpu::avx2

#else  // not built for AVX2: the baseline product is the only one

namespace nabla::ops::cpu::avx2 {

bool usable() {
  return false;
}

void product(const float*, int64_t, bool, const float*, int64_t, bool, float*, int64_t, int64_t, int64_t,
             int64_t, bool) {
  __builtin_trap();  // unreachable: usable() is false
}

void product(const double*, int64_t, bool, const double*, int64_t, bool, double*, int64_t, int64_t, int64_t,
             int64_t, bool) {
  __builtin_trap();
}

}  // namespace nabla::ops::cpu::avx2

#endif
