// Host side of the CUDA reductions: the reduce / reduce_with_index entry points, which plan the
// (A, O, B, I) block (Note [Reduction layout], ops/detail/reduce_layout.h) and pick a launcher by
// op. The launchers and kernels are in the reduce_*.cu files.
#include "nabla/ops/cuda/reduce/layout.h"
#include "nabla/ops/detail/iteration.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "nabla/core/cuda/check.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/cuda/reduce/kernels.h"

namespace nabla::ops::cuda {

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

void reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out, ReduceParams params) {
  const ReductionPlan plan = plan_reduction(x, dims, ReduceBlock::two_runs, {out});
  const ReduceLayout& layout = plan.layout;
  const Tensor& buffer = plan.buffers[0];
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
  plan.finish();
}

void reduce_with_index(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& values,
                       const Tensor& indices) {
  const ReductionPlan plan = plan_reduction(x, dims, ReduceBlock::two_runs, {values, indices});
  NABLA_ASSERT(plan.layout.a == 1, "a single reduced dim is always B");
  reduce_extreme(plan.layout, op == ReduceOp::Max, plan.buffers[0], plan.buffers[1]);
  plan.finish();
}

}  // namespace nabla::ops::cuda
