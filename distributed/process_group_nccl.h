// Public header. The CUDA ProcessGroup on NCCL (distributed/cuda/process_group_nccl.cpp).
//
//   nabla::cuda::set_device(local_rank);
//   auto group = make_nccl_process_group(*store, rank, world_size);  // NCCL id through the store
//   group->allreduce(grad, ReduceOp::average)->wait();  // compute stream waits; host does not
//
// make_nccl_process_group works in every build: without CUDA it throws a clear "built without
// CUDA" error. The class itself is defined only in CUDA builds, so constructing a
// ProcessGroupNccl directly in a build without CUDA fails to link.
//
// Collectives run on the group's own communication stream: it first waits (on the device) for
// the work already queued on the caller's current stream, and wait() makes the current stream
// wait for the collective. The host never blocks, so communication overlaps compute.
//
// Launch modes (NABLA_NCCL_LAUNCH): when-ready (the default) hands each collective to a
// launcher thread that queues it on the communication stream only once the caller's stream has
// reached it, so the communication stream never sits blocked on a wait, which slows the GPU's
// dispatch of the compute kernels (Note [Launching collectives when their inputs are ready] in
// the .cpp). eager queues it at once, behind a device-side wait for the caller's stream.
// There, wait() blocks the host until the collective is on the stream, except for the newest
// one, which launch_pending() or a wait() on it puts out at once.
//
// Faults: the communicator is non-blocking, and a watchdog thread polls ncclCommGetAsyncError
// and each collective's age. On an error or a timeout it aborts the communicator
// (ncclCommAbort, never a blocking destroy), so no kernel spins forever; the next call on the
// group or on any of its Work handles throws CollectiveError naming the rank, the collective
// and the timeout.
#pragma once

#include <memory>

#include "nabla/distributed/process_group.h"
#include "nabla/distributed/store.h"

namespace nabla::distributed {

// A ProcessGroupNccl, or (in a build without CUDA) an Error that says so and names the way out.
std::unique_ptr<ProcessGroup> make_nccl_process_group(Store& store, int rank, int size,
                                                      ProcessGroupOptions options = {});

class ProcessGroupNccl : public ProcessGroup {
 public:
  // Binds the group to the current CUDA device. Every rank of the group must call this with the
  // same store keys (a fresh PrefixStore per group).
  ProcessGroupNccl(Store& store, int rank, int size, ProcessGroupOptions options = {});
  ~ProcessGroupNccl() override;

  std::string backend() const override { return "nccl"; }
  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input,
                                       ReduceOp op = ReduceOp::sum) override;
  std::shared_ptr<Work> barrier() override;
  void launch_pending() override;

  // Aborts the communicator now, as the watchdog does on a fault (for tests and for shutting down
  // a job whose peer is known to be dead). Later calls throw CollectiveError.
  void abort(const std::string& reason);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace nabla::distributed
