// CUDA matrix products on cuBLASLt.
//
// cuBLASLt is column-major. A row-major out (N, M) is the column-major matrix out^T (M, N), so
// out = a @ b is computed as out^T = b^T @ a^T: b plays cuBLASLt's A and a plays its B. A
// row-major operand is then a column-major one of its transpose (op N); a column-major operand
// (a transposed view, like the w^T of linear or the x^T of a backward pass) is read in place
// with op T. Nothing is copied for either.
//
// Batches: dims that all three operands step through with one stride each (always the case
// for contiguous and expanded operands) collapse into one strided-batched call; the rest, if
// any, loop on the host.
//
// Algorithm choice: cublasLtMatmulAlgoGetHeuristic is slow next to a small GEMM, so its answer
// is cached per problem (shapes, leading dims, batch strides, dtype, compute type, epilogue,
// pointer alignments) in a process-wide map; each call only rebuilds the cheap descriptors.
//
// Precision: float32 uses CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 when the caller
// allows TF32 (Routes::matmul_tf32, off by default as in PyTorch); float16/bfloat16 use
// CUBLAS_COMPUTE_32F with reductions never kept in the 16-bit output type; float64 uses
// CUBLAS_COMPUTE_64F.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <map>
#include <mutex>
#include <optional>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/cublas_library.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/handles.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/cuda/linalg/kernels.h"
#include "nabla/ops/detail/matrix_layout.h"

namespace nabla::ops::cuda {

namespace {

// cuBLASLt is opened on first use, not linked (core/cuda/cublas_library.h says why).
using nabla::cuda::cublaslt_api;

// ---- RAII for the cuBLASLt descriptors -----------------------------------------------------

class MatmulDesc {
 public:
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale) {
    NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtMatmulDescCreate(&desc_, compute, scale));
  }
  ~MatmulDesc() { cublaslt_api().cublasLtMatmulDescDestroy(desc_); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    NABLA_CUBLAS_CHECK(
        cublaslt_api().cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(value)));
  }
  cublasLtMatmulDesc_t get() const { return desc_; }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
};

class Layout {
 public:
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t batch_stride) {
    NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtMatrixLayoutCreate(&layout_, type, static_cast<uint64_t>(rows),
                                                                 static_cast<uint64_t>(cols), ld));
    if (batch > 1) {
      const auto count = static_cast<int32_t>(batch);
      NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtMatrixLayoutSetAttribute(
          layout_, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtMatrixLayoutSetAttribute(
          layout_, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof(batch_stride)));
    }
  }
  ~Layout() { cublaslt_api().cublasLtMatrixLayoutDestroy(layout_); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

class Preference {
 public:
  Preference() { NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtMatmulPreferenceCreate(&pref_)); }
  ~Preference() { cublaslt_api().cublasLtMatmulPreferenceDestroy(pref_); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename V>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
    NABLA_CUBLAS_CHECK(
        cublaslt_api().cublasLtMatmulPreferenceSetAttribute(pref_, attribute, &value, sizeof(value)));
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// ---- one cuBLASLt call ---------------------------------------------------------------------

// D (m, n) = op(A) (m, k) @ op(B) (k, n) [+ bias (m)] in cuBLASLt's column-major terms,
// `batch` times with the given strides. C is D (beta = 0, or 1 when `accumulate`).
struct Problem {
  cudaDataType_t type;
  cublasComputeType_t compute;
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t lda, ldb, ldd;
  int64_t batch, stride_a, stride_b, stride_d;
  const void* a;
  const void* b;
  void* d;
  const void* bias;           // null: no epilogue
  bool accumulate;            // beta = 1: D already holds the bias
  void* bias_grad = nullptr;  // BGRADA (sums over k of A's rows) or BGRADB (of B's columns)
  bool bias_grad_of_a = false;
  bool gelu = false;         // D = gelu_tanh(A B [+ bias])
  void* gelu_aux = nullptr;  // and the pre-activation A B [+ bias], laid out as D (GELU_AUX)
  bool relu = false;         // D = relu(A B [+ C] [+ bias])
  const void* c = nullptr;   // C, laid out as D, with beta = 1 (null: C is D)
};

// The largest power of two (up to 256) dividing every byte offset the call may address first.
uint32_t alignment(const void* p, int64_t batch, int64_t batch_stride_bytes) {
  auto bits = reinterpret_cast<uintptr_t>(p);
  if (batch > 1) bits |= static_cast<uintptr_t>(batch_stride_bytes);
  uint32_t align = 256;
  while (align > 1 && (bits & (align - 1)) != 0) align /= 2;
  return align;
}

using Key = std::array<int64_t, 29>;

struct AlgoCache {
  std::mutex mutex;
  std::map<Key, std::optional<cublasLtMatmulAlgo_t>> algos;  // nullopt: no algorithm exists
};

AlgoCache& algo_cache() {
  static auto* cache = new AlgoCache();  // leaked on purpose: used until process exit
  return *cache;
}

size_t element_size(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_64F:
      return 8;
    case CUDA_R_32F:
      return 4;
    default:
      return 2;
  }
}

// Runs the problem; false when cuBLASLt has no algorithm for it (only asked with a bias
// epilogue, which the caller then replaces).
bool run(const Problem& p, int device, cudaStream_t stream) {
  const bool f64 = p.compute == CUBLAS_COMPUTE_64F;
  MatmulDesc desc(p.compute, f64 ? CUDA_R_64F : CUDA_R_32F);
  const cublasOperation_t op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (p.gelu) {
    const cublasLtEpilogue_t epilogue =
        p.gelu_aux ? (p.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                   : (p.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (p.bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    if (p.gelu_aux) {
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.gelu_aux);
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.ldd);
    }
  } else if (p.relu) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, p.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU);
    if (p.bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  } else if (p.bias) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  } else if (p.bias_grad) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE,
             p.bias_grad_of_a ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias_grad);
  }
  // Stored shapes: op(A) is (m, k), so A is (k, m) when transposed; likewise B.
  const Layout la(p.type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda, p.batch, p.stride_a);
  const Layout lb(p.type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb, p.batch, p.stride_b);
  const Layout ld(p.type, p.m, p.n, p.ldd, p.batch, p.stride_d);
  const nabla::cuda::Workspace workspace = nabla::cuda::cublaslt_workspace();
  cublasLtHandle_t handle = nabla::cuda::cublaslt_handle();

  const int64_t item = static_cast<int64_t>(element_size(p.type));
  const uint32_t align_a = alignment(p.a, p.batch, p.stride_a * item);
  const uint32_t align_b = alignment(p.b, p.batch, p.stride_b * item);
  const uint32_t align_d = alignment(p.d, p.batch, p.stride_d * item);
  const uint32_t align_c = p.c ? alignment(p.c, p.batch, p.stride_d * item) : align_d;
  const uint32_t align_bias = p.bias        ? alignment(p.bias, 1, 0)
                              : p.bias_grad ? alignment(p.bias_grad, 1, 0)
                                            : 0;
  const Key key{device,
                p.type,
                p.compute,
                p.trans_a,
                p.trans_b,
                p.m,
                p.n,
                p.k,
                p.lda,
                p.ldb,
                p.ldd,
                p.batch,
                p.stride_a,
                p.stride_b,
                p.stride_d,
                align_a,
                align_b,
                align_d,
                align_bias,
                p.bias != nullptr,
                p.accumulate,
                static_cast<int64_t>(workspace.bytes),
                p.bias_grad != nullptr,
                p.bias_grad_of_a,
                p.gelu,
                p.gelu_aux ? alignment(p.gelu_aux, 1, 0) : 0,
                p.relu,
                p.c != nullptr,
                align_c};

  std::optional<cublasLtMatmulAlgo_t> algo;
  {
    auto& cache = algo_cache();
    std::lock_guard lock(cache.mutex);
    auto it = cache.algos.find(key);
    if (it != cache.algos.end()) {
      algo = it->second;
    } else {
      Preference pref;
      pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace.bytes));
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
      if (p.type == CUDA_R_16F || p.type == CUDA_R_16BF) {
        // Split-K partial sums stay in float32, never rounded to the 16-bit output in between.
        const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
        pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes);
      }
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t status = cublaslt_api().cublasLtMatmulAlgoGetHeuristic(
          handle, desc.get(), la.get(), lb.get(), ld.get(), ld.get(), pref.get(), 1, &result, &found);
      // A bias-gradient or GELU epilogue some versions refuse with another status: the caller
      // sums or composes instead.
      if (status != CUBLAS_STATUS_NOT_SUPPORTED && p.bias_grad == nullptr && !p.gelu && !p.relu && !p.c)
        NABLA_CUBLAS_CHECK(status);
      if (status == CUBLAS_STATUS_SUCCESS && found > 0) algo = result.algo;
      cache.algos.emplace(key, algo);
    }
  }
  if (!algo) {
    NABLA_CHECK(p.bias != nullptr || p.bias_grad != nullptr || p.gelu || p.relu || p.c != nullptr,
                "matmul: cuBLASLt has no algorithm for ({} x {}) @ ({} x {}) x {} batches of {} (leading "
                "dims {}, {}, {})",
                p.m, p.k, p.k, p.n, p.batch, p.type == CUDA_R_64F ? "float64" : "this dtype", p.lda, p.ldb,
                p.ldd);
    return false;
  }

  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta = p.accumulate || p.c != nullptr
                         ? alpha
                         : (f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f));
  NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtMatmul(handle, desc.get(), alpha, p.a, la.get(), p.b, lb.get(),
                                                   beta, p.c != nullptr ? p.c : p.d, ld.get(), p.d, ld.get(),
                                                   &*algo, workspace.data, workspace.bytes, stream));
  return true;
}

// ---- batches -------------------------------------------------------------------------------

// Batch dims (sizes and each operand's strides) after merging the ones every operand steps
// through uniformly; the last entry is the innermost.
struct Batches {
  Shape sizes;
  std::array<Shape, 3> strides;  // a, b, out
};

Batches collapse_batches(const Tensor& a, const Tensor& b, const Tensor& out) {
  Batches batches;
  const std::array<const Tensor*, 3> ts{&a, &b, &out};
  for (int64_t d = 0; d + 2 < out.dim(); ++d) {
    const int64_t size = out.size(d);
    if (size == 1) continue;
    if (!batches.sizes.empty()) {
      bool merge = true;
      for (int t = 0; t < 3; ++t) merge = merge && batches.strides[t].back() == ts[t]->stride(d) * size;
      if (merge) {
        batches.sizes.back() *= size;
        for (int t = 0; t < 3; ++t) batches.strides[t].back() = ts[t]->stride(d);
        continue;
      }
    }
    batches.sizes.push_back(size);
    for (int t = 0; t < 3; ++t) batches.strides[t].push_back(ts[t]->stride(d));
  }
  return batches;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return CUDA_R_32F;
    case DType::Float64:
      return CUDA_R_64F;
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    default:
      NABLA_CHECK(false, "matmul: dtype {} is not supported on CUDA (expected a floating type)",
                  dtype_name(dtype));
  }
  __builtin_unreachable();
}

}  // namespace

bool is_gemm_operand(const Tensor& t) {
  return t.dim() >= 2 && layout_of(t).ok;
}

bool gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmOptions& options) {
  NABLA_ASSERT(a.dim() >= 2 && a.dim() == b.dim() && a.dim() == out.dim(),
               "gemm: operands of ranks {}, {}, {}", a.dim(), b.dim(), out.dim());
  NABLA_ASSERT(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "gemm: mixed dtypes");
  NABLA_ASSERT(out.is_contiguous(), "gemm: output must be contiguous, got strides {}",
               shape_str(out.strides()));
  const int64_t nd = a.dim();
  const int64_t n = a.size(nd - 2), k = a.size(nd - 1), m = b.size(nd - 1);
  NABLA_ASSERT(b.size(nd - 2) == k && out.size(nd - 2) == n && out.size(nd - 1) == m,
               "gemm: shapes {} @ {} -> {}", shape_str(a.sizes()), shape_str(b.sizes()),
               shape_str(out.sizes()));
  const Tensor& bias = options.bias;
  NABLA_ASSERT(!bias.defined() || out.dim() == 2, "gemm: a bias is for 2-d products (linear)");
  const Tensor& sums = options.a_row_sums.defined() ? options.a_row_sums : options.b_column_sums;
  NABLA_ASSERT(
      !sums.defined() || (out.dim() == 2 && !bias.defined() &&
                          !(options.a_row_sums.defined() && options.b_column_sums.defined()) &&
                          sums.is_contiguous() && sums.dtype() == out.dtype() &&
                          sums.numel() == (options.a_row_sums.defined() ? out.size(0) : out.size(1))),
      "gemm: sums {} for a {} product", describe(sums), shape_str(out.sizes()));
  NABLA_ASSERT(
      !options.gelu || (out.dim() == 2 && !sums.defined() && is_reduced_float(out.dtype()) &&
                        (!options.gelu_input.defined() ||
                         (options.gelu_input.sizes() == out.sizes() && options.gelu_input.is_contiguous() &&
                          options.gelu_input.dtype() == out.dtype()))),
      "gemm: a GELU epilogue is for 2-d 16-bit products, its input saved like out");
  // The caller composes: an empty product, or an aux (pre-activation) buffer whose leading
  // dimension (out's columns) cuBLASLt's GELU_AUX epilogues do not take (a multiple of 8).
  if (options.gelu && (out.numel() == 0 || k == 0 || (options.gelu_input.defined() && m % 8 != 0)))
    return false;
  NABLA_ASSERT(!options.accumulate || (!bias.defined() && !sums.defined() && !options.gelu),
               "gemm: accumulate takes no bias, sums or GELU epilogue");
  const Tensor& addend = options.addend;
  const bool relu_epilogue = options.relu || addend.defined();
  NABLA_ASSERT(!relu_epilogue || (out.dim() == 2 && !sums.defined() && !options.gelu && !options.accumulate &&
                                  (!addend.defined() ||
                                   (addend.sizes() == out.sizes() && addend.strides() == out.strides() &&
                                    addend.dtype() == out.dtype()))),
               "gemm: a ReLU or addend epilogue is for 2-d products, the addend laid out as out");
  if (relu_epilogue && (out.numel() == 0 || k == 0)) return false;  // the caller composes
  if (out.numel() == 0) return !sums.defined();
  if (k == 0 && options.accumulate) return true;  // out += an empty sum
  if (k == 0) {                                   // an empty sum: zeros, plus the bias
    if (bias.defined()) {
      copy(bias, out);
    } else {
      fill(out, 0.0);
    }
    if (sums.defined()) fill(sums, 0.0);
    return true;
  }
  const MatrixLayout la = layout_of(a), lb = layout_of(b);
  NABLA_ASSERT(la.ok && lb.ok, "gemm: operands must be plain or transposed matrices");
  const int device = out.device().index;
  nabla::cuda::DeviceGuard current(device);
  const cudaStream_t stream = static_cast<cudaStream_t>(nabla::cuda::current_stream(device).handle());

  const DType dtype = out.dtype();
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (dtype == kFloat64) compute = CUBLAS_COMPUTE_64F;
  if (dtype == kFloat32 && options.allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;

  // Column-major view: D = out^T (m, n), A = b^T (m, k), B = a^T (k, n).
  Problem p{.type = cuda_type(dtype),
            .compute = compute,
            .trans_a = !lb.row_major,
            .trans_b = !la.row_major,
            .m = m,
            .n = n,
            .k = k,
            .lda = lb.ld,
            .ldb = la.ld,
            .ldd = m,
            .batch = 1,
            .stride_a = 0,
            .stride_b = 0,
            .stride_d = 0,
            .a = nullptr,
            .b = nullptr,
            .d = nullptr,
            .bias = nullptr,
            .accumulate = options.accumulate};
  Tensor bias_vector;
  if (bias.defined()) {
    NABLA_ASSERT(bias.dim() == 1 && bias.size(0) == m && bias.dtype() == dtype,
                 "gemm: bias {} for {} columns", describe(bias), m);
    bias_vector = bias.stride(0) == 1 ? bias : bias.contiguous();
    p.bias = bias_vector.data_ptr();
  }
  if (sums.defined()) {
    // Column-major view: a's rows are B's columns (BGRADB), b's columns are A's rows (BGRADA).
    p.bias_grad = sums.data_ptr();
    p.bias_grad_of_a = options.b_column_sums.defined();
  }
  bool sums_written = sums.defined();
  if (options.gelu) {
    p.gelu = true;
    p.gelu_aux = options.gelu_input.defined() ? options.gelu_input.data_ptr() : nullptr;
    // One 2-d product (no batches): the epilogue's algorithm exists or the caller composes.
    p.a = b.data_ptr();
    p.b = a.data_ptr();
    p.d = out.data_ptr();
    return run(p, device, stream);
  }
  if (relu_epilogue) {
    // One 2-d product, as for GELU: the epilogue's algorithm exists or the caller composes.
    p.relu = options.relu;
    p.c = addend.defined() ? addend.data_ptr() : nullptr;
    p.a = b.data_ptr();
    p.b = a.data_ptr();
    p.d = out.data_ptr();
    return run(p, device, stream);
  }

  const Batches batches = collapse_batches(a, b, out);
  int64_t outer = 1;  // batches looped on the host: every batch dim but the innermost collapsed one
  if (!batches.sizes.empty()) {
    p.batch = batches.sizes.back();
    p.stride_a = batches.strides[1].back();  // cuBLASLt's A is our b
    p.stride_b = batches.strides[0].back();
    p.stride_d = batches.strides[2].back();
    for (size_t d = 0; d + 1 < batches.sizes.size(); ++d) outer *= batches.sizes[d];
  }
  NABLA_CHECK(p.batch <= INT32_MAX, "matmul: {} batches exceed cuBLASLt's limit", p.batch);
  const auto item = static_cast<int64_t>(out.itemsize());
  const auto* a_base = static_cast<const char*>(a.data_ptr());
  const auto* b_base = static_cast<const char*>(b.data_ptr());
  auto* out_base = static_cast<char*>(out.data_ptr());
  for (int64_t index = 0; index < outer; ++index) {
    // Offsets of this outer batch entry (its coordinates in every dim but the last).
    int64_t rest = index, off_a = 0, off_b = 0, off_out = 0;
    for (int64_t d = static_cast<int64_t>(batches.sizes.size()) - 2; d >= 0; --d) {
      const int64_t coord = rest % batches.sizes[d];
      rest /= batches.sizes[d];
      off_a += coord * batches.strides[0][d];
      off_b += coord * batches.strides[1][d];
      off_out += coord * batches.strides[2][d];
    }
    p.a = b_base + off_b * item;
    p.b = a_base + off_a * item;
    p.d = out_base + off_out * item;
    if (!run(p, device, stream)) {
      Problem plain = p;
      plain.bias = nullptr;
      plain.bias_grad = nullptr;
      if (p.bias) {
        // No algorithm with the bias epilogue: write the bias first and accumulate onto it.
        plain.accumulate = true;
        copy(bias_vector, out);
      }
      sums_written = false;  // the caller sums on its own
      run(plain, device, stream);
    }
  }
  return sums_written || !sums.defined();
}

}  // namespace nabla::ops::cuda
