// Internal (ops/cuda/fusion). Runs a planned region on CUDA: one generated kernel per fused group,
// the eager kernels for every other op, in the plan's order, on the current stream.
#pragma once

#include <vector>

#include "nabla/core/tensor.h"
#include "nabla/ops/fusion/compile.h"

namespace nabla::ops::cuda::fusion {

struct RunCounts {
  int fused_kernels = 0;     // generated kernels launched
  int fused_ops = 0;         // ops they computed
  int fused_reductions = 0;  // of which sums and means
  int eager_ops = 0;         // ops run by their eager kernels
  int fallbacks = 0;         // fused groups run op by op because their kernel could not be had
  int compiled = 0;          // programs NVRTC compiled for this run
  int from_disk = 0;         // programs the disk cache gave
  double compile_s = 0;      // seconds in NVRTC
};

// tensors[v] is value v's tensor: every input, and for each result the buffer eager mode would
// have written, or an undefined tensor where nothing held it any more (the recorder let it go);
// such a buffer is made, in the value's layout on `device`, only if something must write it (a
// later group reads it, or its group runs op by op). A fused group writes only its outputs. A group
// whose kernel cannot be compiled or loaded runs op by op, after one warning naming the cause.
RunCounts run_region(const ops::fusion::Region& region, const ops::fusion::CompiledRegion& compiled,
                     std::vector<Tensor>& tensors, Device device);

// The same for a plan, writing its kernels first.
RunCounts run_region(const ops::fusion::Region& region, const ops::fusion::Plan& plan,
                     std::vector<Tensor>& tensors, Device device);

}  // namespace nabla::ops::cuda::fusion
