// CPU reductions (sum, mean, var, norm, max/min with and without indices) and softmax.
//
// The input is read in place as the dense (O, R, I) block of Note [Reduction layout]
// (ops/detail/reduce_layout.h), with one reduced run (ReduceBlock::one_run): O outer kept
// positions, R reduced, I inner kept.
//
// Each output is accumulated by a Reducer (init, update, combine, write). Work splits over
// (outer, block of inner) tasks, or, when there are too few outputs to share among threads
// (a full sum), over ranges of R whose partial accumulators combine at the end.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/cpu/reduce_kernels.h"
#include "nabla/ops/detail/iteration.h"
#include "nabla/ops/detail/reduce_layout.h"

namespace nabla::ops::cpu {

namespace {

constexpr int64_t kInnerBlock = 256;  // inner positions reduced together; their accumulators stay in L1

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// The accumulator type: float32 sums in double on the CPU (cheap here, and it keeps long sums
// exact to float precision), float16/bfloat16 in float, integers and bool in int64.
template <typename T>
using reduce_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t,
                                        std::conditional_t<std::is_floating_point_v<T>, double, float>>;

// ---- reducers: init() is the identity of combine(); write(k, acc) stores output k -----------

template <typename T, typename Out>
struct SumReducer {
  using In = T;
  using Acc = reduce_acc_t<T>;
  Out* out;
  Acc divisor;  // 1 for a sum, R for a mean
  Acc init() const { return Acc(0); }
  void update(Acc& a, T x, int64_t) const { a += static_cast<Acc>(static_cast<compute_t<T>>(x)); }
  Acc combine(Acc a, Acc b) const { return a + b; }
  void write(int64_t k, Acc a) const {
    if constexpr (std::is_integral_v<Acc>) {
      out[k] = static_cast<Out>(a);
    } else {
      out[k] = static_cast<Out>(static_cast<compute_t<Out>>(a / divisor));
    }
  }
};

enum class NormKind { Zero, One, Two, Inf, NegInf, General };

template <typename T, NormKind K>
struct NormReducer {
  using In = T;
  using Acc = reduce_acc_t<T>;
  T* out;
  Acc p;
  Acc init() const { return K == NormKind::NegInf ? std::numeric_limits<Acc>::infinity() : Acc(0); }
  void update(Acc& a, T x, int64_t) const {
    const Acc v = std::abs(static_cast<Acc>(static_cast<compute_t<T>>(x)));
    if constexpr (K == NormKind::Zero) a += v != Acc(0);  // NaN counts as non-zero
    if constexpr (K == NormKind::One) a += v;
    if constexpr (K == NormKind::Two) a += v * v;
    if constexpr (K == NormKind::Inf) a = (v > a || std::isnan(v)) ? v : a;
    if constexpr (K == NormKind::NegInf) a = (v < a || std::isnan(v)) ? v : a;
    if constexpr (K == NormKind::General) a += std::pow(v, p);
  }
  Acc combine(Acc a, Acc b) const {
    if constexpr (K == NormKind::Inf) return (b > a || std::isnan(b)) ? b : a;
    if constexpr (K == NormKind::NegInf) return (b < a || std::isnan(b)) ? b : a;
    return a + b;
  }
  void write(int64_t k, Acc a) const {
    if constexpr (K == NormKind::Two) a = std::sqrt(a);
    if constexpr (K == NormKind::General) a = std::pow(a, Acc(1) / p);
    out[k] = static_cast<T>(static_cast<compute_t<T>>(a));
  }
};

// Welford's running mean and M2 per lane, merged with Chan's formula: one pass, and stable
// where sum(x^2) - sum(x)^2 / n would cancel.
template <typename T>
struct VarReducer {
  using In = T;
  using C = reduce_acc_t<T>;
  struct Acc {
    int64_t n;
    C mean, m2;
  };
  T* out;
  int64_t correction;
  Acc init() const { return {0, C(0), C(0)}; }
  void update(Acc& a, T x, int64_t) const {
    const C v = static_cast<C>(static_cast<compute_t<T>>(x));
    a.n += 1;
    const C d = v - a.mean;
    a.mean += d / static_cast<C>(a.n);
    a.m2 += d * (v - a.mean);
  }
  Acc combine(const Acc& a, const Acc& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const C d = b.mean - a.mean, fb = static_cast<C>(b.n) / static_cast<C>(n);
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<C>(a.n) * fb};
  }
  void write(int64_t k, const Acc& a) const {
    // N - correction <= 0 divides by zero: inf, or NaN when M2 is 0, as in PyTorch.
    const C denom = static_cast<C>(std::max<int64_t>(0, a.n - correction));
    out[k] = static_cast<T>(static_cast<compute_t<T>>(a.m2 / denom));
  }
};

// Max or min with the position along R. NaN beats every number; equal values keep the
// earlier position, also when combining lanes or threads.
template <typename T, bool IsMax>
struct ExtremeReducer {
  using In = T;
  using C = compute_t<T>;
  struct Acc {
    C value;
    int64_t index;  // -1: nothing seen yet
  };
  T* values;
  int64_t* indices;  // null when only values are wanted
  static bool better(C x, C best) {
    if (is_nan(best)) return false;
    if (is_nan(x)) return true;
    return IsMax ? x > best : x < best;
  }
  Acc init() const { return {C(), -1}; }
  void update(Acc& a, T x, int64_t r) const {
    const C v = static_cast<C>(x);
    if (a.index < 0 || better(v, a.value)) a = {v, r};
  }
  Acc combine(const Acc& a, const Acc& b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    if (better(b.value, a.value)) return b;
    if (better(a.value, b.value)) return a;
    return a.index <= b.index ? a : b;
  }
  void write(int64_t k, const Acc& a) const {
    values[k] = static_cast<T>(a.value);
    if (indices) indices[k] = a.index;
  }
};

// ---- the driver ----------------------------------------------------------------------------

// Folds x[o, r0:r1, i0:i1] into acc[0 : i1 - i0].
template <typename Red>
void reduce_range(const Red& red, const typename Red::In* x, int64_t R, int64_t inner, int64_t o, int64_t i0,
                  int64_t i1, int64_t r0, int64_t r1, typename Red::Acc* acc) {
  const typename Red::In* base = x + o * R * inner;
  if (inner == 1) {
    // One long row: four independent lanes hide the latency of each add.
    typename Red::Acc lane[4] = {acc[0], red.init(), red.init(), red.init()};
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      for (int j = 0; j < 4; ++j) red.update(lane[j], base[r + j], r + j);
    }
    for (; r < r1; ++r) red.update(lane[0], base[r], r);
    acc[0] = red.combine(red.combine(lane[0], lane[1]), red.combine(lane[2], lane[3]));
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const typename Red::In* row = base + r * inner;
    for (int64_t i = i0; i < i1; ++i) red.update(acc[i - i0], row[i], r);
  }
}

template <typename Red>
void run_reduction(const Red& red, const ReduceLayout& layout) {
  using Acc = typename Red::Acc;
  const auto* x = layout.input.data_ptr<typename Red::In>();
  const int64_t outer = layout.o, R = layout.b, inner = layout.i;
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t tasks = outer * blocks;
  const int64_t threads = omp_get_max_threads();
  const bool parallel = outer * R * inner >= kParallelGrain && threads > 1 && !omp_in_parallel();

  if (parallel && tasks < threads && R >= 4 * threads) {
    // Few outputs and long reductions: each thread folds a range of R for every output.
    const int64_t outputs = outer * inner;
    const int team = static_cast<int>(threads);
    std::vector<Acc> partial(static_cast<size_t>(threads * outputs), red.init());
#pragma omp parallel num_threads(team)
    {
      const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
      const int64_t chunk = (R + n - 1) / n, r0 = std::min(R, t * chunk), r1 = std::min(R, r0 + chunk);
      Acc* mine = partial.data() + t * outputs;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i0 = 0; i0 < inner; i0 += kInnerBlock) {
          reduce_range(red, x, R, inner, o, i0, std::min(inner, i0 + kInnerBlock), r0, r1,
                       mine + o * inner + i0);
        }
      }
    }
    for (int64_t k = 0; k < outputs; ++k) {
      Acc a = partial[k];
      for (int64_t t = 1; t < threads; ++t) a = red.combine(a, partial[t * outputs + k]);
      red.write(k, a);
    }
    return;
  }

#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t o = task / blocks, i0 = (task % blocks) * kInnerBlock,
                  i1 = std::min(inner, i0 + kInnerBlock);
    Acc acc[kInnerBlock];
    for (int64_t i = 0; i < i1 - i0; ++i) acc[i] = red.init();
    reduce_range(red, x, R, inner, o, i0, i1, 0, R, acc);
    for (int64_t i = 0; i < i1 - i0; ++i) red.write(o * inner + i0 + i, acc[i]);
  }
}

template <typename T>
void run_norm(const ReduceLayout& layout, T* out, double p) {
  using Acc = reduce_acc_t<T>;
  const Acc pa = static_cast<Acc>(p);
  if (p == 0) return run_reduction(NormReducer<T, NormKind::Zero>{out, pa}, layout);
  if (p == 1) return run_reduction(NormReducer<T, NormKind::One>{out, pa}, layout);
  if (p == 2) return run_reduction(NormReducer<T, NormKind::Two>{out, pa}, layout);
  if (std::isinf(p) && p > 0) return run_reduction(NormReducer<T, NormKind::Inf>{out, pa}, layout);
  if (std::isinf(p)) return run_reduction(NormReducer<T, NormKind::NegInf>{out, pa}, layout);
  run_reduction(NormReducer<T, NormKind::General>{out, pa}, layout);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out, ReduceParams params) {
  const ReductionPlan plan = plan_reduction(x, dims, ReduceBlock::one_run, {out});
  const ReduceLayout& layout = plan.layout;
  const Tensor& buffer = plan.buffers[0];
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      dispatch(x.dtype(), "sum", [&]<typename T>() {
        using Out = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
        const auto divisor = static_cast<reduce_acc_t<T>>(op == ReduceOp::Mean ? layout.b : 1);
        run_reduction(SumReducer<T, Out>{buffer.data_ptr<Out>(), divisor}, layout);
      });
      break;
    case ReduceOp::Var:
      dispatch<TypeSet::Floating>(x.dtype(), "var", [&]<typename T>() {
        run_reduction(VarReducer<T>{buffer.data_ptr<T>(), params.correction}, layout);
      });
      break;
    case ReduceOp::Norm:
      dispatch<TypeSet::Floating>(x.dtype(), "norm",
                                  [&]<typename T>() { run_norm<T>(layout, buffer.data_ptr<T>(), params.p); });
      break;
    case ReduceOp::Max:
    case ReduceOp::Min:
      dispatch(x.dtype(), op == ReduceOp::Max ? "max" : "min", [&]<typename T>() {
        if (op == ReduceOp::Max) {
          run_reduction(ExtremeReducer<T, true>{buffer.data_ptr<T>(), nullptr}, layout);
        } else {
          run_reduction(ExtremeReducer<T, false>{buffer.data_ptr<T>(), nullptr}, layout);
        }
      });
      break;
  }
  plan.finish();
}

void reduce_with_index(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& values,
                       const Tensor& indices) {
  const ReductionPlan plan = plan_reduction(x, dims, ReduceBlock::one_run, {values, indices});
  const ReduceLayout& layout = plan.layout;
  dispatch(x.dtype(), op == ReduceOp::Max ? "max" : "min", [&]<typename T>() {
    T* v = plan.buffers[0].data_ptr<T>();
    int64_t* i = plan.buffers[1].data_ptr<int64_t>();
    if (op == ReduceOp::Max) {
      run_reduction(ExtremeReducer<T, true>{v, i}, layout);
    } else {
      run_reduction(ExtremeReducer<T, false>{v, i}, layout);
    }
  });
  plan.finish();
}

// ---- softmax --------------------------------------------------------------------------------

namespace {

// Three passes per (o, block of inner): the max, the sum of exp(x - max), then the outputs.
// float32 and float64 keep exp(x - max) in y between the last two passes; float16/bfloat16
// recompute it rather than round it to 16 bits before normalizing.
template <typename T>
void softmax_block(const T* x, T* y, int64_t R, int64_t inner, int64_t n, bool log) {
  using C = compute_t<T>;
  C max[kInnerBlock], sum[kInnerBlock];
  for (int64_t i = 0; i < n; ++i) max[i] = -std::numeric_limits<C>::infinity(), sum[i] = C(0);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const C v = static_cast<C>(x[r * inner + i]);
      max[i] = (v > max[i] || std::isnan(v)) ? v : max[i];  // a NaN makes the whole row NaN
    }
  }
  constexpr bool kStoreExp = std::is_same_v<T, C>;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const C e = std::exp(static_cast<C>(x[r * inner + i]) - max[i]);
      if constexpr (kStoreExp) {
        if (!log) y[r * inner + i] = e;
      }
      sum[i] += e;
    }
  }
  if (log) {
    for (int64_t i = 0; i < n; ++i) sum[i] = max[i] + std::log(sum[i]);  // log-sum-exp
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t i = 0; i < n; ++i)
        y[r * inner + i] = static_cast<T>(static_cast<C>(x[r * inner + i]) - sum[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) sum[i] = C(1) / sum[i];
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kStoreExp) {
        y[r * inner + i] *= sum[i];
      } else {
        y[r * inner + i] = static_cast<T>(std::exp(static_cast<C>(x[r * inner + i]) - max[i]) * sum[i]);
      }
    }
  }
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log) {
  if (x.numel() == 0) return;
  const ReduceLayout layout = plan_softmax_layout(x, dim);
  const Tensor& in = layout.input;
  const Tensor y = softmax_buffer(layout, out);
  const int64_t outer = layout.o, R = layout.b, inner = layout.i;
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock, tasks = outer * blocks;
  const bool parallel = x.numel() >= kParallelGrain && !omp_in_parallel();
  dispatch<TypeSet::Floating>(x.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    const T* xp = in.data_ptr<T>();
    T* yp = y.data_ptr<T>();
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * kInnerBlock;
      const int64_t offset = o * R * inner + i0;
      softmax_block(xp + offset, yp + offset, R, inner, std::min(kInnerBlock, inner - i0), log);
    }
  });
  finish_softmax(y, out);
}

}  // namespace nabla::ops::cpu
