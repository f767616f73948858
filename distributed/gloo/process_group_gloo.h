// Public header. The CPU ProcessGroup on Gloo (the library behind PyTorch's CPU backend).
//
//   auto store = TcpStore::from_env();
//   ProcessGroupGloo group(*store, rank, world_size);
//   group.allreduce(t, ReduceOp::average)->wait();
//
// Collectives run in order on one worker thread per group, so they are asynchronous like
// NCCL's and a Work can time out. It lives in its own library (nabla::distributed_gloo) because
// Gloo's shared library and its dependencies are absent on the GPU machines.
#pragma once

#include <memory>

#include "nabla/distributed/process_group.h"
#include "nabla/distributed/store.h"

namespace nabla::distributed {

class ProcessGroupGloo : public ProcessGroup {
 public:
  // Connects to every other rank through `store` (which must outlive only this constructor).
  // The address to listen on: NABLA_GLOO_IFNAME (a network interface) if set; else loopback
  // when MASTER_ADDR is local; else this host's name.
  ProcessGroupGloo(Store& store, int rank, int size, ProcessGroupOptions options = {});
  ~ProcessGroupGloo() override;

  std::string backend() const override { return "gloo"; }
  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input,
                                       ReduceOp op = ReduceOp::sum) override;
  std::shared_ptr<Work> barrier() override;

  struct Impl;  // public so the .cpp's helpers can name it; defined only there

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nabla::distributed
