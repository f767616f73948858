// Host side of the CUDA reductions: the layout planner (Note [CUDA reduction layout] in
// reduce_layout.h), output buffers, and the reduce / reduce_with_index entry points, which pick
// a launcher by op. The launchers and kernels are in the reduce_*.cu files.
#include "nabla/ops/cuda/reduce_layout.h"
#include "nabla/ops/iteration.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <numeric>

#include "nabla/core/cuda/check.h"
#include "nabla/ops/cuda/kernels.h"
#include "nabla/ops/cuda/reduce_kernels.h"

namespace nabla::ops::cuda {

namespace {

// A dense copy of x whose memory order is `order` (a permutation of x's dims), with x's sizes.
Tensor dense_copy(const Tensor& x, const std::vector<int64_t>& order) {
  Shape strides = dense_strides_in_order(x.sizes(), order);
  Tensor buffer = Tensor::empty({x.numel()}, {.dtype = x.dtype(), .device = x.device()});
  Tensor view = Tensor::alias(buffer, x.sizes(), strides, 0);
  copy(x, view);
  return view;
}

struct Run {
  bool reduced;
  int64_t size;
};

std::vector<Run> runs_of(const Tensor& t, const std::vector<int64_t>& order,
                         const std::vector<bool>& reduced) {
  std::vector<Run> runs;
  for (int64_t d : order) {
    if (runs.empty() || runs.back().reduced != reduced[d]) {
      runs.push_back({reduced[d], t.size(d)});
    } else {
      runs.back().size *= t.size(d);
    }
  }
  return runs;
}

// (A, O, B, I) holds R, K, RK, KR, RKR, KRK and RKRK.
bool fits_block(const std::vector<Run>& runs) {
  return runs.size() < 4 || (runs.size() == 4 && runs[0].reduced);
}

}  // namespace

ReduceLayout plan_reduce_layout(const Tensor& x, const std::vector<bool>& reduced) {
  ReduceLayout layout;
  if (is_non_overlapping_and_dense(x.sizes(), x.strides())) {
    layout.input = x;
  } else {
    std::vector<int64_t> identity(x.dim());
    std::iota(identity.begin(), identity.end(), 0);
    layout.input = dense_copy(x, identity);
  }
  std::vector<int64_t> order = memory_order(layout.input);
  std::vector<Run> runs = runs_of(layout.input, order, reduced);
  if (!fits_block(runs)) {
    // Gather the kept dims first and the reduced ones last: one (O, B) block.
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (x.size(d) == 1) perm.push_back(d);
    }
    for (int64_t d : order) {
      if (!reduced[d]) perm.push_back(d);
    }
    for (int64_t d : order) {
      if (reduced[d]) perm.push_back(d);
    }
    layout.input = dense_copy(layout.input, perm);
    order = memory_order(layout.input);
    runs = runs_of(layout.input, order, reduced);
  }
  const auto reduced_runs = std::count_if(runs.begin(), runs.end(), [](const Run& r) { return r.reduced; });
  size_t k = 0;
  if (reduced_runs == 2) layout.a = runs[k++].size;  // the pattern starts R K R
  if (k < runs.size() && !runs[k].reduced) layout.o = runs[k++].size;
  if (k < runs.size() && runs[k].reduced) layout.b = runs[k++].size;
  if (k < runs.size() && !runs[k].reduced) layout.i = runs[k++].size;
  NABLA_ASSERT(k == runs.size(), "reduction layout: {} runs left unplaced", runs.size() - k);

  layout.out_strides = reduced_output_strides(x.sizes(), order, reduced);
  return layout;
}

void finish_output(const Tensor& buffer, const Tensor& out, const Shape& strides) {
  if (!buffer.is_same(out)) copy(Tensor::alias(buffer, out.sizes(), strides, 0), out);
}

int sm_count(int device) {
  static std::array<std::atomic<int>, 128> counts{};
  NABLA_ASSERT(device >= 0 && device < static_cast<int>(counts.size()), "device index {}", device);
  int n = counts[device].load(std::memory_order_relaxed);
  if (n == 0) {
    NABLA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

namespace {

std::vector<bool> reduced_mask(int64_t ndim, const Shape& dims) {
  std::vector<bool> mask(ndim, false);
  for (int64_t d : dims) mask[d] = true;
  return mask;
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out, ReduceParams params) {
  if (out.numel() == 0) return;
  if (x.numel() == 0) {
    NABLA_ASSERT(op != ReduceOp::Max && op != ReduceOp::Min, "max/min of no elements reached the kernel");
    const bool nan = op == ReduceOp::Mean || op == ReduceOp::Var;
    fill(out, nan ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return;
  }
  const ReduceLayout layout = plan_reduce_layout(x, reduced_mask(x.dim(), dims));
  const Tensor buffer = output_buffer(out, layout.out_strides);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      reduce_sum(layout, buffer, op == ReduceOp::Mean);
      break;
    case ReduceOp::Var:
      reduce_var(layout, buffer, params.correction);
      break;
    case ReduceOp::Norm:
      reduce_norm(layout, buffer, params.p);
      break;
    case ReduceOp::Max:
    case ReduceOp::Min:
      reduce_extreme(layout, op == ReduceOp::Max, buffer, Tensor());
      break;
  }
  finish_output(buffer, out, layout.out_strides);
}

void reduce_with_index(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& values,
                       const Tensor& indices) {
  NABLA_ASSERT(op == ReduceOp::Max || op == ReduceOp::Min, "reduce_with_index is for max and min");
  NABLA_ASSERT(dims.size() <= 1, "an index names a position along one dim");
  if (values.numel() == 0) return;
  NABLA_ASSERT(x.numel() > 0, "max/min of no elements reached the kernel");
  const ReduceLayout layout = plan_reduce_layout(x, reduced_mask(x.dim(), dims));
  NABLA_ASSERT(layout.a == 1, "a single reduced dim is always B");
  const Tensor value_buffer = output_buffer(values, layout.out_strides);
  const Tensor index_buffer = output_buffer(indices, layout.out_strides);
  reduce_extreme(layout, op == ReduceOp::Max, value_buffer, index_buffer);
  finish_output(value_buffer, values, layout.out_strides);
  finish_output(index_buffer, indices, layout.out_strides);
}

}  // namespace nabla::ops::cuda
