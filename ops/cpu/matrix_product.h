// Internal (CPU kernels). One matrix product c [+]= a @ b on strided float32/float64 matrices,
// the only way CPU kernels multiply matrices, and its split over OpenMP threads.
//
// Note [Eigen threads]
// Eigen's OpenMP GEMM hands out panels to its threads and synchronises them with busy-wait loops
// on every panel. On a loaded machine (data-loader threads, other processes on the same cores) a
// descheduled thread stalls the others, which spin: SmallCnn's fc1 (128x3136 @ 3136x128) took
// about 25x longer on 2 threads than on 1. So Eigen is built with EIGEN_DONT_PARALLELIZE, and
// parallel_product() gives each thread one block of rows or columns of the output, computed by
// serial Eigen, with a single join at the end.
//
// Note [Eigen for AVX2]
// The build targets baseline x86-64 (SSE2), where Eigen's GEMM does 4-wide multiplies and adds;
// with AVX2 + FMA it does 8-wide fused multiply-adds, 2-3x the speed. matrix_product_avx2.cpp
// compiles the same Eigen product with -mavx2 -mfma, under a renamed Eigen namespace (so that
// no symbol is shared with the baseline copy), and product() takes it when the CPU has both.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace nabla::ops::cpu {

// A (rows, cols) matrix at `data`: element (i, j) at i * ld + j (row-major) or i + j * ld.
template <typename T>
struct MatrixRef {
  T* data;
  int64_t rows, cols, ld;
  bool row_major = true;

  MatrixRef transposed() const { return {data, cols, rows, ld, !row_major}; }
  MatrixRef middle_rows(int64_t begin, int64_t count) const {
    return {data + begin * (row_major ? ld : 1), count, cols, ld, row_major};
  }
  MatrixRef middle_cols(int64_t begin, int64_t count) const {
    return {data + begin * (row_major ? 1 : ld), rows, count, ld, row_major};
  }
};

// c = a @ b, or c += a @ b with `accumulate`, on the calling thread. c is row-major and aliases
// neither input; a.cols == b.rows. float32 and float64.
void product(const MatrixRef<const float>& a, const MatrixRef<const float>& b, const MatrixRef<float>& c,
             bool accumulate);
void product(const MatrixRef<const double>& a, const MatrixRef<const double>& b, const MatrixRef<double>& c,
             bool accumulate);

// Products below this many multiply-adds (about 0.1 ms on one core) run on the calling thread.
inline constexpr int64_t kParallelProduct = int64_t{1} << 20;

// product(), with the larger output dimension split over the OpenMP threads when the product is
// large and no parallel region is active (Note [Eigen threads]).
template <typename T>
void parallel_product(const MatrixRef<const T>& a, const MatrixRef<const T>& b, const MatrixRef<T>& c,
                      bool accumulate) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads == 1 || c.rows * c.cols * a.cols < kParallelProduct) return product(a, b, c, accumulate);
  const bool by_rows = c.rows >= c.cols;
  const int64_t extent = by_rows ? c.rows : c.cols;
#pragma omp parallel num_threads(threads)
  {
    // One block per thread of the team we got; multiples of 16 keep Eigen's register tiles whole.
    const int64_t team = omp_get_num_threads();
    const int64_t block = ((extent + team - 1) / team + 15) & ~int64_t{15};
    const int64_t begin = std::min<int64_t>(extent, omp_get_thread_num() * block);
    const int64_t size = std::min<int64_t>(extent - begin, block);
    if (size > 0) {
      if (by_rows) {
        product(a.middle_rows(begin, size), b, c.middle_rows(begin, size), accumulate);
      } else {
        product(a, b.middle_cols(begin, size), c.middle_cols(begin, size), accumulate);
      }
    }
  }
}

}  // namespace nabla::ops::cpu
