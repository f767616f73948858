// The layout planner of the reductions and softmax (Note [Reduction layout] in
// detail/reduce_layout.h). Copies go through the backend kernels, without autograd.
#include "nabla/ops/detail/reduce_layout.h"

#include <algorithm>
#include <numeric>

#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/detail/iteration.h"

namespace nabla::ops {

namespace {

void copy_values(const Tensor& src, const Tensor& dst) {
  dispatch(
      "reduction layout", src, [&] { cpu::copy(src, dst); }, [&] { cuda::copy(src, dst); });
}

// A dense copy of x whose memory order is `order` (a permutation of x's dims), with x's sizes.
Tensor dense_copy(const Tensor& x, const std::vector<int64_t>& order) {
  Shape strides = dense_strides_in_order(x.sizes(), order);
  Tensor buffer = Tensor::empty({x.numel()}, {.dtype = x.dtype(), .device = x.device()});
  Tensor view = ops::alias(buffer, x.sizes(), strides, 0);
  copy_values(x, view);
  return view;
}

struct Run {
  bool reduced;
  int64_t size;
};

std::vector<Run> runs_of(const Shape& sizes, const std::vector<int64_t>& order,
                         const std::vector<bool>& reduced) {
  std::vector<Run> runs;
  for (int64_t d : order) {
    if (runs.empty() || runs.back().reduced != reduced[d]) {
      runs.push_back({reduced[d], sizes[d]});
    } else {
      runs.back().size *= sizes[d];
    }
  }
  return runs;
}
std::vector<Run> runs_of(const Tensor& t, const std::vector<int64_t>& order,
                         const std::vector<bool>& reduced) {
  return runs_of(t.sizes(), order, reduced);
}

// Places the runs into the (A, O, B, I) block (they fit it).
void place_runs(const std::vector<Run>& runs, ReduceLayout& layout) {
  const auto reduced_runs = std::count_if(runs.begin(), runs.end(), [](const Run& r) { return r.reduced; });
  size_t k = 0;
  if (reduced_runs == 2) layout.a = runs[k++].size;  // the pattern starts R K R
  if (k < runs.size() && !runs[k].reduced) layout.o = runs[k++].size;
  if (k < runs.size() && runs[k].reduced) layout.b = runs[k++].size;
  if (k < runs.size() && !runs[k].reduced) layout.i = runs[k++].size;
  NABLA_ASSERT(k == runs.size(), "reduction layout: {} runs left unplaced", runs.size() - k);
}

bool fits(const std::vector<Run>& runs, ReduceBlock block) {
  if (block == ReduceBlock::one_run) {
    return std::count_if(runs.begin(), runs.end(), [](const Run& r) { return r.reduced; }) <= 1;
  }
  // (A, O, B, I) holds R, K, RK, KR, RKR, KRK and RKRK.
  return runs.size() < 4 || (runs.size() == 4 && runs[0].reduced);
}

}  // namespace

std::vector<bool> reduced_mask(int64_t ndim, const Shape& dims) {
  std::vector<bool> mask(ndim, false);
  for (int64_t d : dims) mask[d] = true;
  return mask;
}

ReduceLayout plan_reduce_layout(const Tensor& x, const std::vector<bool>& reduced, ReduceBlock block) {
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
  if (!fits(runs, block)) {
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
  place_runs(runs, layout);
  layout.out_strides = reduced_output_strides(x.sizes(), order, reduced);
  return layout;
}

std::optional<ReduceLayout> plan_reduce_layout_in_place(const Shape& sizes, const Shape& strides,
                                                        const std::vector<bool>& reduced, ReduceBlock block) {
  if (!is_non_overlapping_and_dense(sizes, strides)) return std::nullopt;
  const std::vector<int64_t> order = memory_order(sizes, strides);
  const std::vector<Run> runs = runs_of(sizes, order, reduced);
  if (!fits(runs, block)) return std::nullopt;
  ReduceLayout layout;
  place_runs(runs, layout);
  layout.out_strides = reduced_output_strides(sizes, order, reduced);
  return layout;
}

ReduceLayout plan_softmax_layout(const Tensor& x, int64_t dim) {
  std::vector<bool> mask(x.dim(), false);
  if (x.dim() > 0) mask[dim] = true;
  return plan_reduce_layout(x, mask, ReduceBlock::one_run);
}

Tensor softmax_buffer(const ReduceLayout& layout, const Tensor& out) {
  const Tensor& in = layout.input;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (in.size(d) != 1 && out.stride(d) != in.stride(d)) {
      Tensor flat = Tensor::empty({in.numel()}, {.dtype = in.dtype(), .device = in.device()});
      return ops::alias(flat, in.sizes(), in.strides(), 0);
    }
  }
  return out;
}

void finish_softmax(const Tensor& buffer, const Tensor& out) {
  if (!buffer.is_same(out)) copy_values(buffer, out);
}

ReductionPlan plan_reduction(const Tensor& x, const Shape& dims, ReduceBlock block, TensorList outputs) {
  NABLA_ASSERT(x.numel() > 0, "an empty reduction reached the kernel (the front end fills those)");
  ReductionPlan plan{plan_reduce_layout(x, reduced_mask(x.dim(), dims), block), {}, std::move(outputs)};
  for (const Tensor& out : plan.outputs) plan.buffers.push_back(output_buffer(out, plan.layout.out_strides));
  return plan;
}

void ReductionPlan::finish() const {
  for (size_t k = 0; k < outputs.size(); ++k) finish_output(buffers[k], outputs[k], layout.out_strides);
}

void finish_output(const Tensor& buffer, const Tensor& out, const Shape& strides) {
  if (!buffer.is_same(out)) copy_values(ops::alias(buffer, out.sizes(), strides, 0), out);
}

}  // namespace nabla::ops
