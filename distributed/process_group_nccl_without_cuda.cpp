// The NCCL process group in a build without CUDA: constructing one is a clear error.
#include "nabla/distributed/process_group_nccl.h"

namespace nabla::distributed {

struct ProcessGroupNccl::State {};

ProcessGroupNccl::ProcessGroupNccl(Store&, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size, options) {
  throw Error(
      "ProcessGroupNccl: nabla was built without CUDA; use ProcessGroupGloo for CPU tensors, or "
      "rebuild with the CUDA toolkit (cmake --preset cuda)");
}
ProcessGroupNccl::~ProcessGroupNccl() = default;
void ProcessGroupNccl::abort(const std::string&) {}
std::shared_ptr<Work> ProcessGroupNccl::allreduce(Tensor&, ReduceOp) {
  return nullptr;
}
std::shared_ptr<Work> ProcessGroupNccl::broadcast(Tensor&, int) {
  return nullptr;
}
std::shared_ptr<Work> ProcessGroupNccl::allgather(Tensor&, const Tensor&) {
  return nullptr;
}
std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter(Tensor&, const Tensor&, ReduceOp) {
  return nullptr;
}
std::shared_ptr<Work> ProcessGroupNccl::barrier() {
  return nullptr;
}
void ProcessGroupNccl::launch_pending() {}

}  // namespace nabla::distributed
