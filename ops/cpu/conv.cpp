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
// large pairs than threads, runs the pairs in turn and lets Eigen thread each product instead.
// The weight gradient sums over the batch, so each thread accumulates into its own buffer and
// the buffers are added at the end, in thread order (deterministic for a given thread count).
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <vector>

#include "nabla/ops/cpu/conv_kernels.h"

namespace nabla::ops::cpu {

namespace {

// Products below this many multiply-adds are too small for Eigen's own threads to pay off.
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
  // Whether to spread the (n, g) pairs over threads (else Eigen threads each product).
  bool parallel_tasks() const {
    return tasks() > 1 && !omp_in_parallel() && (tasks() >= omp_get_max_threads() || og * k * p < kSmallGemm);
  }
};

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMatrix<T>>;
template <typename T>
using MutMap = Eigen::Map<RowMatrix<T>>;

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
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          T* out = row + oh * g.wo;
          const int64_t ih = oh * sh - ph + i * dh;
          if (ih < 0 || ih >= g.h) {
            std::fill_n(out, g.wo, T(0));
            continue;
          }
          const T* in = x + (c * g.h + ih) * g.w;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const int64_t iw = ow * sw - pw + j * dw;
            out[ow] = (iw >= 0 && iw < g.w) ? in[iw] : T(0);
          }
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
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * sh - ph + i * dh;
          if (ih < 0 || ih >= g.h) continue;
          const T* in = row + oh * g.wo;
          T* out = dx + (c * g.h + ih) * g.w;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const int64_t iw = ow * sw - pw + j * dw;
            if (iw >= 0 && iw < g.w) out[iw] += in[ow];
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
#pragma omp for schedule(static)
    for (int64_t t = 0; t < g.tasks(); ++t) {
      const int64_t n = t / g.groups, grp = t % g.groups;
      ConstMap<T> col(col_for(px, n, grp, g, buffer), g.k, g.p);
      ConstMap<T> wg(pw + grp * g.og * g.k, g.og, g.k);
      MutMap<T> yg(py + (n * g.o + grp * g.og) * g.p, g.og, g.p);
      yg.noalias() = wg * col;
      if (pb) yg.colwise() += Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(pb + grp * g.og, g.og);
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
#pragma omp for schedule(static)
    for (int64_t t = 0; t < g.tasks(); ++t) {
      const int64_t n = t / g.groups, grp = t % g.groups;
      ConstMap<T> wg(pw + grp * g.og * g.k, g.og, g.k);
      ConstMap<T> gyg(pgy + (n * g.o + grp * g.og) * g.p, g.og, g.p);
      T* gxg = pgx + (n * g.c + grp * g.cg) * g.h * g.w;
      if (g.pointwise) {
        MutMap<T>(gxg, g.cg, g.p).noalias() = wg.transpose() * gyg;
        continue;
      }
      dcol.resize(static_cast<size_t>(g.k * g.p));
      MutMap<T>(dcol.data(), g.k, g.p).noalias() = wg.transpose() * gyg;
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
  const int threads = parallel ? omp_get_max_threads() : 1;
  // partial[t]: thread t's sum over its pairs (thread 0 writes grad_w directly).
  std::vector<std::vector<T>> partial(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads) if (parallel)
  {
    const int tid = omp_get_thread_num();
    T* acc = pgw;
    if (tid > 0) {
      partial[tid].assign(static_cast<size_t>(wsize), T(0));
      acc = partial[tid].data();
    }
    std::vector<T> buffer;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < g.tasks(); ++t) {
      const int64_t n = t / g.groups, grp = t % g.groups;
      ConstMap<T> col(col_for(px, n, grp, g, buffer), g.k, g.p);
      ConstMap<T> gyg(pgy + (n * g.o + grp * g.og) * g.p, g.og, g.p);
      MutMap<T>(acc + grp * g.og * g.k, g.og, g.k).noalias() += gyg * col.transpose();
    }
  }
  for (int t = 1; t < threads; ++t) {
    if (partial[t].empty()) continue;  // the runtime gave fewer threads
    const T* src = partial[t].data();
#pragma omp parallel for schedule(static) if (wsize > (int64_t{1} << 16))
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

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const ConvParams& p) {
  check_contiguous("conv2d", {x, w, bias, y});
  const Geometry g(x.sizes(), w.sizes(), y.sizes(), p);
  if (y.numel() == 0) return;
  dispatch_conv(x.dtype(), "conv2d", [&]<typename T>() { forward_impl<T>(x, w, bias, y, g); });
}

void conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x, const ConvParams& p) {
  check_contiguous("conv2d_backward_input", {grad_y, w, grad_x});
  const Geometry g(grad_x.sizes(), w.sizes(), grad_y.sizes(), p);
  if (grad_x.numel() == 0) return;
  dispatch_conv(w.dtype(), "conv2d_backward_input",
                [&]<typename T>() { backward_input_impl<T>(grad_y, w, grad_x, g); });
}

void conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Tensor& grad_w,
                            const ConvParams& p) {
  check_contiguous("conv2d_backward_weight", {grad_y, x, grad_w});
  const Geometry g(x.sizes(), grad_w.sizes(), grad_y.sizes(), p);
  if (grad_w.numel() == 0) return;
  dispatch_conv(x.dtype(), "conv2d_backward_weight",
                [&]<typename T>() { backward_weight_impl<T>(grad_y, x, grad_w, g); });
}

}  // namespace nabla::ops::cpu
