// Internal (ops). A region made ready to run: its plan and the source of every fused group's
// kernel, memoized by the region's exact description, so a step that records the same ops every
// call (an eager step, the warm-up and the capture) plans and writes its kernels once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nabla/ops/fusion/codegen.h"
#include "nabla/ops/fusion/plan.h"

namespace nabla::ops::fusion {

struct CompiledRegion {
  Plan plan;
  std::vector<KernelSource> kernels;  // per group of plan; an empty name where not fused
};

// Plans `region` and writes its kernels, or returns what an equal region got before.
std::shared_ptr<const CompiledRegion> compile_region(const Region& region);

// The region's exact description (ops, scalars, dtypes, layouts, live-out marks) as bytes: two
// regions with equal keys plan and generate identically.
std::string region_key(const Region& region);

}  // namespace nabla::ops::fusion
