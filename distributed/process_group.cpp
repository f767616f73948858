#include "nabla/distributed/process_group.h"

#include "nabla/core/dispatch.h"
#include "nabla/distributed/process_group_nccl.h"

namespace nabla::distributed {

std::unique_ptr<ProcessGroup> make_nccl_process_group(Store& store, int rank, int size,
                                                      ProcessGroupOptions options) {
  // Note [One backend dispatch]: without CUDA this branch compiles away, and ProcessGroupNccl
  // needs no definition.
  if constexpr (kHasCuda) {
    return std::make_unique<ProcessGroupNccl>(store, rank, size, options);
  } else {
    throw Error(
        "ProcessGroupNccl: this nabla was built without CUDA; use ProcessGroupGloo for CPU tensors, or "
        "rebuild with the CUDA toolkit (cmake --preset cuda)");
  }
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::average:
      return "average";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

void ProcessGroup::check_tensor(const Tensor& t, const char* collective) const {
  NABLA_CHECK(t.defined(), "{}: the tensor is undefined", collective);
  NABLA_CHECK(t.is_contiguous(),
              "{}: the tensor must be contiguous (collectives work on flat memory); "
              "call .contiguous() first",
              collective);
}

}  // namespace nabla::distributed
