// CPU 2-d convolution: im2col + Eigen GEMM.
//
// For one image n and one group g, with K = (C / groups) kH kW and P = Ho Wo:
//   im2col   col (K, P):  col[(c kH + i) kW + j][oh Wo + ow] = x[c][oh sH - pH + i dH][ow sW - pW + j dW]
//                         (zero where that falls in the padding)
//   forward  y_ng (O / groups, P) = w_g (O / groups, K) @ col
//   data     dcol (K, P) = w_g^T @ dy_ng, then col2im adds each entry back onto the pixel it read
//   filter   dw_g (O / groups, K) += dy_ng @ col^T, summed over the batch
// A 1x1 convolution with stride 1 and no padding reads x itself as col (no copy).
//
// Threads: the (n, g) pairs are independent, so a batch runs one pair per OpenMP thread, each
// with its own col buffer; Eigen is serial inside the parallel region. A single pair, or fewer
// large pairs than threads, runs the pairs in turn and splits each product over the threads
// (parallel_product, Note [Eigen threads] in matrix_product.h).
// Pairs are handed out dynamically: when the cores are shared with other work, a thread the OS
// deschedules would otherwise hold its static share of the batch while the others wait at the
// barrier. The weight gradient sums over the batch, so it accumulates fixed chunks of pairs into
// their own buffers and adds them at the end in chunk order (deterministic for a given thread
// count, whichever thread ran which chunk).
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "nabla/ops/cpu/matrix_product.h"
#include "nabla/ops/detail/conv.h"

namespace nabla::ops::cpu {

namespace {

// Products below this many multiply-adds are too small to split over threads.
constexpr int64_t kSmallGemm = int64_t{1} << 18;

struct Geometry {
  int64_t n, c, h, w;    // input (N, C, H, W)
  int64_t o, kh, kw;     // weight (O, C / groups, kH, kW)
  int64_t ho, wo;        // output spatial size
  int64_t groups;        //
  int64_t cg, og, k, p;  // C / groups, O / groups, K = cg kH kW, P = Ho Wo
  ConvParams params;
  bool pointwise;  // col is x itself

  Geometry(const Shape& x, const Shape& weight, const Shape& y, const ConvParams& prm)
      : n(x[0]),
        c(x[1]),
        h(x[2]),
        w(x[3]),
        o(weight[0]),
        kh(weight[2]),
        kw(weight[3]),
        ho(y[2]),
        wo(y[3]),
        groups(prm.groups),
        params(prm) {
    cg = c / groups;
    og = o / groups;
    k = cg * kh * kw;
    p = ho * wo;
    pointwise = kh == 1 && kw == 1 && prm.stride[0] == 1 && prm.stride[1] == 1 && prm.padding[0] == 0 &&
                prm.padding[1] == 0;
  }
  int64_t tasks() const { return n * groups; }
  // Whether to spread the (n, g) pairs over threads (else each product is split over them).
  bool parallel_tasks() const {
    return tasks() > 1 && !omp_in_parallel() && (tasks() >= omp_get_max_threads() || og * k * p < kSmallGemm);
  }
};

// A dense row-major (rows, cols) matrix at p.
template <typename T>
MatrixRef<T> dense(T* p, int64_t rows, int64_t cols) {
  return {p, rows, cols, cols};
}

// The outputs [begin, end) of a row whose tap ow * stride + offset lands inside [0, size); the
// ones outside read the padding. Lets the row loops below run without a bounds check per element.
struct OutputRange {
  int64_t begin, end;
};

OutputRange inside_outputs(int64_t offset, int64_t stride, int64_t size, int64_t outputs) {
  const int64_t begin = std::min(outputs, offset >= 0 ? 0 : (-offset + stride - 1) / stride);
  const int64_t last = size - 1 - offset;  // ow * stride <= last
  const int64_t end = last < 0 ? 0 : std::min(outputs, last / stride + 1);
  return {begin, std::max(begin, end)};
}

// col (K, P) from one image's group of channels x (C / groups, H, W).
template <typename T>
void im2col(const T* x, T* col, const Geometry& g) {
  const auto [sh, sw] = g.params.stride;
  const auto [ph, pw] = g.params.padding;
  const auto [dh, dw] = g.params.dilation;
  for (int64_t c = 0; c < g.cg; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * g.p;
        const int64_t offset = j * dw - pw;  // iw = ow * sw + offset
        const OutputRange inside = inside_outputs(offset, sw, g.w, g.wo);
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          T* out = row + oh * g.wo;
          const int64_t ih = oh * sh - ph + i * dh;
          if (ih < 0 || ih >= g.h) {
            std::fill_n(out, g.wo, T(0));
            continue;
          }
          const T* in = x + (c * g.h + ih) * g.w;
          std::fill_n(out, inside.begin, T(0));
          if (sw == 1) {  // a plain copy, which the compiler vectorizes
            for (int64_t ow = inside.begin; ow < inside.end; ++ow) out[ow] = in[ow + offset];
          } else {
            for (int64_t ow = inside.begin; ow < inside.end; ++ow) out[ow] = in[ow * sw + offset];
          }
          std::fill(out + inside.end, out + g.wo, T(0));
        }
      }
    }
  }
}

// dx (C / groups, H, W) += the entries of dcol (K, P), each onto the pixel im2col read it from.
template <typename T>
void col2im_add(const T* dcol, T* dx, const Geometry& g) {
  const auto [sh, sw] = g.params.stride;
  const auto [ph, pw] = g.params.padding;
  const auto [dh, dw] = g.params.dilation;
  for (int64_t c = 0; c < g.cg; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = dcol + ((c * g.kh + i) * g.kw + j) * g.p;
        const int64_t offset = j * dw - pw;
        const OutputRange inside = inside_outputs(offset, sw, g.w, g.wo);
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * sh - ph + i * dh;
          if (ih < 0 || ih >= g.h) continue;
          const T* in = row + oh * g.wo;
          T* out = dx + (c * g.h + ih) * g.w;
          if (sw == 1) {
            for (int64_t ow = inside.begin; ow < inside.end; ++ow) out[ow + offset] += in[ow];
          } else {
            for (int64_t ow = inside.begin; ow < inside.end; ++ow) out[ow * sw + offset] += in[ow];
          }
        }
      }
    }
  }
}

// The col matrix of pair (n, grp): x itself for a pointwise convolution, else built in `buffer`.
template <typename T>
const T* col_for(const T* x, int64_t n, int64_t grp, const Geometry& g, std::vector<T>& buffer) {
  const T* xg = x + (n * g.c + grp * g.cg) * g.h * g.w;
  if (g.pointwise) return xg;
  buffer.resize(static_cast<size_t>(g.k * g.p));
  im2col(xg, buffer.data(), g);
  return buffer.data();
}

template <typename T>
void forward_impl(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Geometry& g) {
  const T* px = x.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  const T* pb = bias.defined() ? bias.data_ptr<T>() : nullptr;
  T* py = y.data_ptr<T>();
#pragma omp parallel if (g.parallel_tasks())
  {
    std::vector<T> buffer;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < g.tasks(); ++t) {
      const int64_t n = t / g.groups, grp = t % g.groups;
      const auto col = dense(col_for(px, n, grp, g, buffer), g.k, g.p);
      const auto wg = dense(pw + grp * g.og * g.k, g.og, g.k);
      T* yg = py + (n * g.o + grp * g.og) * g.p;  // (O / groups, P)
      parallel_product(wg, col, dense(yg, g.og, g.p), false);
      if (pb) {
        for (int64_t o = 0; o < g.og; ++o) {
          const T b = pb[grp * g.og + o];
          for (int64_t i = 0; i < g.p; ++i) yg[o * g.p + i] += b;
        }
      }
    }
  }
}

template <typename T>
void backward_input_impl(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x, const Geometry& g) {
  const T* pgy = grad_y.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  T* pgx = grad_x.data_ptr<T>();
#pragma omp parallel if (g.parallel_tasks())
  {
    std::vector<T> dcol;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < g.tasks(); ++t) {
      const int64_t n = t / g.groups, grp = t % g.groups;
      const auto wg = dense(pw + grp * g.og * g.k, g.og, g.k);
      const auto gyg = dense(pgy + (n * g.o + grp * g.og) * g.p, g.og, g.p);
      T* gxg = pgx + (n * g.c + grp * g.cg) * g.h * g.w;
      if (g.pointwise) {
        parallel_product(wg.transposed(), gyg, dense(gxg, g.cg, g.p), false);
        continue;
      }
      dcol.resize(static_cast<size_t>(g.k * g.p));
      parallel_product(wg.transposed(), gyg, dense(dcol.data(), g.k, g.p), false);
      std::fill_n(gxg, g.cg * g.h * g.w, T(0));
      col2im_add(dcol.data(), gxg, g);
    }
  }
}

template <typename T>
void backward_weight_impl(const Tensor& grad_y, const Tensor& x, const Tensor& grad_w, const Geometry& g) {
  const T* pgy = grad_y.data_ptr<T>();
  const T* px = x.data_ptr<T>();
  T* pgw = grad_w.data_ptr<T>();
  const int64_t wsize = g.o * g.k;
  std::fill_n(pgw, wsize, T(0));
  const bool parallel = g.parallel_tasks();
  // The pairs are cut into fixed chunks, each summed into its own buffer (chunk 0 into grad_w),
  // and the buffers are added in chunk order: the result does not depend on which thread ran
  // which chunk, so threads can take chunks as they come (see the note on scheduling above).
  // Several chunks per thread, unless the buffers would be large.
  const int64_t per_thread = wsize <= (int64_t{1} << 20) ? 4 : 1;
  const int64_t chunks = parallel ? std::min<int64_t>(g.tasks(), per_thread * omp_get_max_threads()) : 1;
  std::vector<std::vector<T>> partial(static_cast<size_t>(chunks));
#pragma omp parallel if (parallel)
  {
    std::vector<T> buffer;
#pragma omp for schedule(dynamic, 1)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      T* acc = pgw;
      if (chunk > 0) {
        partial[chunk].assign(static_cast<size_t>(wsize), T(0));
        acc = partial[chunk].data();
      }
      for (int64_t t = chunk * g.tasks() / chunks; t < (chunk + 1) * g.tasks() / chunks; ++t) {
        const int64_t n = t / g.groups, grp = t % g.groups;
        const auto col = dense(col_for(px, n, grp, g, buffer), g.k, g.p);
        const auto gyg = dense(pgy + (n * g.o + grp * g.og) * g.p, g.og, g.p);
        parallel_product(gyg, col.transposed(), dense(acc + grp * g.og * g.k, g.og, g.k), true);
      }
    }
  }
  for (int64_t chunk = 1; chunk < chunks; ++chunk) {
    const T* src = partial[chunk].data();
#pragma omp parallel for schedule(static) if (wsize > (int64_t{1} << 20))
    for (int64_t i = 0; i < wsize; ++i) pgw[i] += src[i];
  }
}

template <typename Fn>
void dispatch_conv(DType dtype, const char* op, Fn&& fn) {
  dispatch<TypeSet::Floating>(dtype, op, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, compute_t<T>>) {
      NABLA_ASSERT(false, "{}: {} reached the CPU kernel; the front end computes it in float32", op,
                   dtype_name(dtype));
    } else {
      fn.template operator()<T>();
    }
  });
}

void check_contiguous(const char* op, std::initializer_list<std::reference_wrapper<const Tensor>> ts) {
  for (const Tensor& t : ts) {
    NABLA_ASSERT(!t.defined() || t.is_contiguous(), "{}: the front end passes contiguous operands, got {}",
                 op, describe(t));
  }
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const ConvParams& p, const Routes& /*routes*/) {
  check_contiguous("conv2d", {x, w, bias, y});
  const Geometry g(x.sizes(), w.sizes(), y.sizes(), p);
  if (y.numel() == 0) return;
  dispatch_conv(x.dtype(), "conv2d", [&]<typename T>() { forward_impl<T>(x, w, bias, y, g); });
}

void conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x, const ConvParams& p,
                           const Routes& /*routes*/) {
  check_contiguous("conv2d_backward_input", {grad_y, w, grad_x});
  const Geometry g(grad_x.sizes(), w.sizes(), grad_y.sizes(), p);
  if (grad_x.numel() == 0) return;
  dispatch_conv(w.dtype(), "conv2d_backward_input",
                [&]<typename T>() { backward_input_impl<T>(grad_y, w, grad_x, g); });
}

void conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Tensor& grad_w, const ConvParams& p,
                            const Routes& /*routes*/) {
  check_contiguous("conv2d_backward_weight", {grad_y, x, grad_w});
  const Geometry g(x.sizes(), grad_w.sizes(), grad_y.sizes(), p);
  if (grad_w.numel() == 0) return;
  dispatch_conv(x.dtype(), "conv2d_backward_weight",
                [&]<typename T>() { backward_weight_impl<T>(grad_y, x, grad_w, g); });
}

}  // namespace

// The CPU convolution backend (ops/detail/conv.h): NCHW only, one route, no fused passes.
const Convolution kConvolution{
    .layout = [](MemoryFormat, DType) { return MemoryFormat::Contiguous; },
    .forward = conv2d_forward,
    .forward_relu = [](const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const ConvParams&, const Routes&) { return false; },
    .backward_input = conv2d_backward_input,
    .backward_input_accumulate = nullptr,
    .backward_weight = conv2d_backward_weight};

}  // namespace nabla::ops::cpu
