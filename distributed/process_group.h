// Public header. ProcessGroup: collectives among the ranks of a job, and the Work handles they
// return.
//
//   auto work = group.allreduce(grad, ReduceOp::average);   // returns at once
//   ...                                                     // overlap other work
//   work->wait();                                           // throws on error or timeout
//
// Every collective is asynchronous and in-place where that makes sense. Backends: NCCL for CUDA
// tensors (process_group_nccl.h), Gloo for CPU tensors (process_group_gloo.h, a separate library
// because the GPU machines lack Gloo's dependencies). A failed or timed-out collective raises
// CollectiveError naming the rank, the collective and the timeout; nothing blocks forever.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "nabla/core/error.h"
#include "nabla/core/tensor.h"

namespace nabla::distributed {

enum class ReduceOp { sum, average, max, min };
const char* to_string(ReduceOp op);

// A collective failed, timed out, or a peer died.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

class Work {
 public:
  virtual ~Work() = default;
  // True once the collective has finished (successfully or not); never blocks.
  virtual bool is_completed() = 0;
  // Blocks until the collective is done, rethrowing its error. For NCCL, "done" means the
  // result is ordered before later work on the current stream (the host does not wait for the
  // device unless `timeout` forces a check).
  virtual void wait() = 0;
  // Blocks the host until the collective has finished on the device too, or throws
  // CollectiveError after `timeout`.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
};

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout = std::chrono::minutes(10);  // per collective
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, ProcessGroupOptions options)
      : rank_(rank), size_(size), options_(options) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const ProcessGroupOptions& options() const { return options_; }
  virtual std::string backend() const = 0;

  // In place: every rank's `tensor` becomes the reduction over ranks.
  virtual std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  // In place: every rank's `tensor` becomes root's.
  virtual std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) = 0;
  // `output` (size() * input.numel() elements, contiguous) receives every rank's input in rank
  // order.
  virtual std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) = 0;
  // `input` holds size() equal chunks; rank r's `output` becomes the reduction of chunk r.
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input,
                                               ReduceOp op = ReduceOp::sum) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
  // Puts every collective issued so far on its way now. For a backend that defers launches until
  // their inputs are ready (NCCL's when-ready mode), before waiting for something needed next;
  // the others launch at once, and this does nothing.
  virtual void launch_pending() {}

 protected:
  // Checks what every collective requires of its tensors, naming the collective on failure.
  void check_tensor(const Tensor& t, const char* collective) const;

  int rank_;
  int size_;
  ProcessGroupOptions options_;
};

}  // namespace nabla::distributed
