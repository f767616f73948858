#include "nabla/ops/cuda/fusion/executor.h"

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "nabla/core/cuda/graph.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/cuda/fusion/kernels.h"
#include "nabla/ops/cuda/fusion/nvrtc.h"
#include "nabla/ops/cuda/reduce/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/fusion/codegen.h"

namespace nabla::ops::cuda::fusion {

namespace {

using ops::fusion::Group;
using ops::fusion::Op;
using ops::fusion::OpKind;
using ops::fusion::Region;
using ops::fusion::Value;

// One warning per distinct cause: a step with forty groups and no NVRTC warns once.
void warn_once(const std::string& cause) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard lock(mutex);
  if (seen.insert(cause).second) {
    NABLA_LOG_WARN("step compiler: running fused groups unfused: {}", cause);
  }
}

// Value v's buffer, made in its recorded layout if the recorder let the front end's one go.
const Tensor& buffer(const Region& region, std::vector<Tensor>& t, int v, Device device) {
  Tensor& slot = t[static_cast<size_t>(v)];
  if (!slot.defined()) {
    // Sized by the layout's extent, not its element count: a cat's slot has the whole output's
    // strides (Note [Concatenation in place]) and reaches past numel.
    const Value& value = region.value(v);
    slot =
        Tensor::empty({layout_extent(value.sizes, value.strides)}, {.dtype = value.dtype, .device = device})
            .as_strided(value.sizes, value.strides);
  }
  return slot;
}

void run_eagerly(const Region& region, const Op& op, std::vector<Tensor>& t, Device device) {
  const auto v = [&](int value) -> const Tensor& { return buffer(region, t, value, device); };
  switch (op.kind) {
    case OpKind::Unary:
      ops::cuda::unary(op.unary, v(op.args[0]), v(op.result), op.params);
      return;
    case OpKind::Binary:
      ops::cuda::binary(op.binary, v(op.args[0]), v(op.args[1]), v(op.result), op.alpha);
      return;
    case OpKind::Where:
      ops::cuda::where(v(op.args[0]), v(op.args[1]), v(op.args[2]), v(op.result));
      return;
    case OpKind::Cast:
      ops::cuda::copy(v(op.args[0]), v(op.result));
      return;
    case OpKind::Fill:
      ops::cuda::fill(v(op.result), op.params.a);
      return;
    case OpKind::Reduce: {
      // The kernel writes the keepdim shape; the result is contiguous (ops/reduce.cpp), so the
      // reduced dims may be put back as size 1 with contiguous strides.
      Shape keep = region.value(op.args[0]).sizes;
      for (int64_t d : op.dims) keep[static_cast<size_t>(d)] = 1;
      const Tensor out = v(op.result).as_strided(keep, contiguous_strides(keep));
      ops::cuda::reduce(op.mean ? ops::cuda::ReduceOp::Mean : ops::cuda::ReduceOp::Sum, v(op.args[0]),
                        op.dims, out);
      return;
    }
  }
  NABLA_ASSERT(false, "fusion executor: {} has no eager kernel", describe(region, op));
}

}  // namespace

RunCounts run_region(const Region& region, const ops::fusion::CompiledRegion& compiled,
                     std::vector<Tensor>& tensors, Device device) {
  NABLA_ASSERT(tensors.size() == region.values().size(), "fusion executor: {} tensors for {} values",
               tensors.size(), region.values().size());
  const ops::fusion::Plan& plan = compiled.plan;
  RunCounts counts;
  const LoadStats before = load_stats();
  const bool may_load = !nabla::cuda::is_capturing();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const Group& group = plan.groups[g];
    if (group.fused) {
      std::string cause = nvrtc_unavailable_reason();
      if (cause.empty()) {
        try {
          const ops::fusion::KernelSource& source = compiled.kernels.at(g);
          const LoadedKernel kernel = load_kernel(source, device.index, may_load);
          std::vector<void*> pointers;
          pointers.reserve(source.operands.size());
          for (int value : source.operands)
            pointers.push_back(buffer(region, tensors, value, device).data_ptr());
          launch_kernel(kernel, source, pointers);
          ++counts.fused_kernels;
          counts.fused_ops += static_cast<int>(group.ops.size());
          counts.fused_reductions += group.reduce >= 0 ? 1 : 0;
          continue;
        } catch (const std::exception& e) {
          cause = e.what();
        }
      }
      warn_once(cause);
      ++counts.fallbacks;
    }
    for (int o : group.ops) {
      run_eagerly(region, region.op(o), tensors, device);
      ++counts.eager_ops;
    }
  }
  const LoadStats& after = load_stats();
  counts.compiled = after.compiled - before.compiled;
  counts.from_disk = after.from_disk - before.from_disk;
  counts.compile_s = after.compile_s - before.compile_s;
  return counts;
}

RunCounts run_region(const Region& region, const ops::fusion::Plan& plan, std::vector<Tensor>& tensors,
                     Device device) {
  ops::fusion::CompiledRegion compiled{.plan = plan, .kernels = {}};
  compiled.kernels.resize(plan.groups.size());
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    if (plan.groups[g].fused) compiled.kernels[g] = ops::fusion::generate_kernel(region, plan.groups[g]);
  }
  return run_region(region, compiled, tensors, device);
}

}  // namespace nabla::ops::cuda::fusion
