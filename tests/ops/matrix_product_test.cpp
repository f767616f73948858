// The CPU matrix product kernel (ops/cpu/matrix_product.h) against plain loops in long double:
// every pair of storage orders, padded leading dimensions, accumulate, and products large
// enough to be split over threads by rows and by columns (sizes not multiples of the block).
#include <omp.h>

#include <random>

#include "nabla/ops/cpu/matrix_product.h"
#include "test_util.h"

namespace nabla {
namespace {

using ops::cpu::MatrixRef;

template <typename T>
struct Stored {
  std::vector<T> data;
  MatrixRef<const T> ref;
};

// A (rows, cols) matrix of random non-zero values, in the given order, with `pad` unused entries
// after each row (row-major) or column (column-major).
template <typename T>
Stored<T> random_matrix(int64_t rows, int64_t cols, bool row_major, int64_t pad, std::mt19937_64& rng) {
  const int64_t ld = (row_major ? cols : rows) + pad;
  std::uniform_real_distribution<double> u(0.1, 1.0);
  Stored<T> m;
  m.data.resize(static_cast<size_t>(ld * (row_major ? rows : cols)));
  for (T& v : m.data) v = static_cast<T>(rng() % 2 ? u(rng) : -u(rng));
  m.ref = {m.data.data(), rows, cols, ld, row_major};
  return m;
}

template <typename T>
T at(const MatrixRef<const T>& m, int64_t i, int64_t j) {
  return m.data[m.row_major ? i * m.ld + j : i + j * m.ld];
}

template <typename T>
void check_product(int64_t rows, int64_t depth, int64_t cols, bool parallel, uint64_t seed, double tol) {
  std::mt19937_64 rng(seed);
  for (int orders = 0; orders < 4; ++orders) {
    for (bool accumulate : {false, true}) {
      const bool a_row = orders & 1, b_row = orders & 2;
      const Stored<T> a = random_matrix<T>(rows, depth, a_row, 3, rng);
      const Stored<T> b = random_matrix<T>(depth, cols, b_row, 5, rng);
      const int64_t ldc = cols + 2;
      std::vector<T> c(static_cast<size_t>(rows * ldc));
      for (T& v : c) v = static_cast<T>(std::uniform_real_distribution<double>(0.5, 1.5)(rng));
      const std::vector<T> before = c;
      const MatrixRef<T> out{c.data(), rows, cols, ldc};
      if (parallel) {
        ops::cpu::parallel_product<T>(a.ref, b.ref, out, accumulate);
      } else {
        ops::cpu::product(a.ref, b.ref, out, accumulate);
      }
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < ldc; ++j) {
          const T got = c[i * ldc + j];
          if (j >= cols) {  // the padding is left alone
            ASSERT_EQ(got, before[i * ldc + j]) << "padding at " << i << "," << j;
            continue;
          }
          long double want = accumulate ? before[i * ldc + j] : 0.0L;
          for (int64_t k = 0; k < depth; ++k)
            want += static_cast<long double>(at(a.ref, i, k)) * at(b.ref, k, j);
          ASSERT_NEAR(static_cast<double>(got), static_cast<double>(want),
                      tol * (1.0 + std::abs(static_cast<double>(want))))
              << rows << "x" << depth << "x" << cols << " orders " << orders << " accumulate " << accumulate
              << " at " << i << "," << j;
        }
      }
    }
  }
}

TEST(CpuMatrixProduct, MatchesLoopsForEveryStorageOrderAndLeadingDimension) {
  const uint64_t seed = testing::test_seed();
  check_product<double>(7, 5, 9, false, seed, 1e-13);
  check_product<float>(33, 17, 21, false, seed + 1, 1e-5);
  check_product<double>(1, 13, 1, false, seed + 2, 1e-13);
}

TEST(CpuMatrixProduct, ParallelSplitByRowsOrColumnsMatchesLoops) {
  // Above kParallelProduct multiply-adds, so split over threads when there are several.
  const uint64_t seed = testing::test_seed();
  static_assert(157 * 97 * 83 > ops::cpu::kParallelProduct && 61 * 131 * 211 > ops::cpu::kParallelProduct);
  check_product<float>(157, 97, 83, true, seed, 1e-5);         // more rows: split by rows
  check_product<double>(61, 131, 211, true, seed + 1, 1e-13);  // more columns: split by columns
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);  // an odd team: blocks do not divide the extent evenly
  check_product<float>(157, 97, 83, true, seed + 2, 1e-5);
  check_product<double>(61, 131, 211, true, seed + 3, 1e-13);
  omp_set_num_threads(threads);
}

TEST(CpuMatrixProduct, EmptyDepthGivesZerosOrLeavesTheSum) {
  std::vector<float> c = {1.5f, -2.5f, 3.5f, 4.5f};
  const MatrixRef<const float> a{nullptr, 2, 0, 1}, b{nullptr, 0, 2, 2};
  ops::cpu::product(a, b, MatrixRef<float>{c.data(), 2, 2, 2}, true);
  EXPECT_EQ(c, (std::vector<float>{1.5f, -2.5f, 3.5f, 4.5f}));
  ops::cpu::product(a, b, MatrixRef<float>{c.data(), 2, 2, 2}, false);
  EXPECT_EQ(c, (std::vector<float>(4, 0.0f)));
}

}  // namespace
}  // namespace nabla
