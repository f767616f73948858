// CPU matrix products on Eigen (through matrix_product.h).
//
// Each matrix of a batch is referenced in place with a leading dimension, as row-major or
// column-major, so a transposed view (the usual b^T of a backward pass) costs no copy. A batch of
// several products runs one product per OpenMP thread; a single large product is split over the
// threads by parallel_product (see Note [Eigen threads] in matrix_product.h).
#include <algorithm>
#include <type_traits>

#include "nabla/ops/cpu/linalg_kernels.h"
#include "nabla/ops/cpu/matrix_product.h"
#include "nabla/ops/detail/matrix_layout.h"

namespace nabla::ops::cpu {

namespace {

// Products below this many multiply-adds are too small to split over threads, so a
// batch of them is better spread over threads one product each.
constexpr int64_t kSmallGemm = int64_t{1} << 18;

struct GemmDims {
  int64_t n, k, m, lda, ldb;
  bool a_row_major, b_row_major, accumulate;
};

// out (n, m) [+]= a (n, k) @ b (k, m); out is dense row-major.
template <typename T>
void gemm_one(const T* a, const T* b, T* out, const GemmDims& d) {
  parallel_product<T>({a, d.n, d.k, d.lda, d.a_row_major}, {b, d.k, d.m, d.ldb, d.b_row_major},
                      {out, d.n, d.m, std::max<int64_t>(d.m, 1)},
                      d.accumulate);  // serial inside a batch loop
}

// Element offset of batch entry `index` in `t`, whose leading `batch_sizes.size()` dims are the batch.
int64_t batch_offset(const Tensor& t, const Shape& batch_sizes, int64_t index) {
  int64_t offset = 0;
  for (int64_t d = static_cast<int64_t>(batch_sizes.size()) - 1; d >= 0; --d) {
    offset += (index % batch_sizes[d]) * t.stride(d);
    index /= batch_sizes[d];
  }
  return offset;
}

}  // namespace

bool is_gemm_operand(const Tensor& t) {
  return t.dim() >= 2 && layout_of(t).ok;
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  NABLA_ASSERT(a.dim() >= 2 && a.dim() == b.dim() && a.dim() == out.dim(),
               "gemm: operands of ranks {}, {}, {}", a.dim(), b.dim(), out.dim());
  NABLA_ASSERT(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "gemm: mixed dtypes");
  NABLA_ASSERT(out.is_contiguous(), "gemm: output must be contiguous, got strides {}",
               shape_str(out.strides()));
  const int64_t nd = a.dim();
  const Shape batch_sizes(out.sizes().begin(), out.sizes().end() - 2);
  const int64_t batch = numel_of(batch_sizes);
  GemmDims dims{.n = a.size(nd - 2),
                .k = a.size(nd - 1),
                .m = b.size(nd - 1),
                .lda = 0,
                .ldb = 0,
                .a_row_major = true,
                .b_row_major = true,
                .accumulate = accumulate};
  NABLA_ASSERT(b.size(nd - 2) == dims.k && out.size(nd - 2) == dims.n && out.size(nd - 1) == dims.m,
               "gemm: shapes {} @ {} -> {}", shape_str(a.sizes()), shape_str(b.sizes()),
               shape_str(out.sizes()));
  if (batch == 0 || dims.n == 0 || dims.m == 0) return;
  const MatrixLayout la = layout_of(a), lb = layout_of(b);
  NABLA_ASSERT(la.ok && lb.ok, "gemm: operands must be plain or transposed matrices");
  dims.lda = la.ld;
  dims.ldb = lb.ld;
  dims.a_row_major = la.row_major;
  dims.b_row_major = lb.row_major;

  dispatch<TypeSet::Floating>(a.dtype(), "matmul", [&]<typename T>() {
    if constexpr (!std::is_same_v<T, compute_t<T>>) {
      NABLA_ASSERT(false, "gemm: {} reached the kernel; the front end computes it in float32",
                   dtype_name(a.dtype()));
    } else {
      T* po = out.data_ptr<T>();
      if (dims.k == 0) {  // an empty sum
        if (!accumulate) std::fill_n(po, out.numel(), T(0));
        return;
      }
      const T* pa = a.data_ptr<T>();
      const T* pb = b.data_ptr<T>();
      const int64_t out_step = dims.n * dims.m;
      const bool small = dims.n * dims.k * dims.m < kSmallGemm;
      const bool batch_parallel =
          batch > 1 && !omp_in_parallel() && (small || batch >= omp_get_max_threads());
#pragma omp parallel for schedule(static) if (batch_parallel)
      for (int64_t i = 0; i < batch; ++i) {
        gemm_one<T>(pa + batch_offset(a, batch_sizes, i), pb + batch_offset(b, batch_sizes, i),
                    po + i * out_step, dims);
      }
    }
  });
}

}  // namespace nabla::ops::cpu
