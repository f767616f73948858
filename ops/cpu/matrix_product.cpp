// The CPU matrix product: Eigen, serial (Note [Eigen threads]), AVX2 + FMA when the CPU has it
// (Note [Eigen for AVX2] in matrix_product.h).
#include "nabla/ops/cpu/matrix_product.h"

#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "nabla/ops/cpu/matrix_product_avx2.h"

namespace nabla::ops::cpu {

namespace {

#include "nabla/ops/cpu/matrix_product_eigen.inc"

template <typename T>
void product_impl(const MatrixRef<const T>& a, const MatrixRef<const T>& b, const MatrixRef<T>& c,
                  bool accumulate) {
  if (c.rows == 0 || c.cols == 0) return;
  if (a.cols == 0) {  // an empty sum
    if (!accumulate) {
      for (int64_t i = 0; i < c.rows; ++i) std::fill_n(c.data + i * c.ld, c.cols, T(0));
    }
    return;
  }
  static const bool use_avx2 = avx2::usable();
  if (use_avx2) {
    return avx2::product(a.data, a.ld, a.row_major, b.data, b.ld, b.row_major, c.data, c.ld, c.rows, c.cols,
                         a.cols, accumulate);
  }
  eigen_product(a.data, a.ld, a.row_major, b.data, b.ld, b.row_major, c.data, c.ld, c.rows, c.cols, a.cols,
                accumulate);
}

}  // namespace

void product(const MatrixRef<const float>& a, const MatrixRef<const float>& b, const MatrixRef<float>& c,
             bool accumulate) {
  product_impl(a, b, c, accumulate);
}

void product(const MatrixRef<const double>& a, const MatrixRef<const double>& b, const MatrixRef<double>& c,
             bool accumulate) {
  product_impl(a, b, c, accumulate);
}

}  // namespace nabla::ops::cpu
