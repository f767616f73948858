// Public header. DistributedDataParallel: data-parallel training over a ProcessGroup.
//
//   nabla::distributed::DistributedDataParallel ddp(model, group);   // broadcasts rank 0's weights
//   auto loss = loss_fn(ddp(x), y);
//   loss.backward();            // buckets are averaged across ranks while backward goes on
//   optimizer.step();           // gradients are already averaged
//
// How: gradients live in flat buckets (about 25 MB; the first, which backward fills first, is
// small so communication starts early), filled in reverse registration order, which is roughly
// the order backward produces them. Each parameter's .grad becomes a view into its bucket, with
// the parameter's own strides (so channels_last stays channels_last and the fused optimizers
// apply), and nothing is copied out. A post-accumulate hook marks a parameter ready; a full
// bucket moves its fresh gradients into their views in one batched copy and is allreduced at
// once (in bucket order, the same on every rank), overlapping the rest of backward. At the end
// of backward the remaining buckets go out and every bucket's work is waited for (on CUDA that
// orders the compute stream after the NCCL stream; the host does not wait). When .grad is
// already the view (zero_grad(false), or accumulation under no_sync) nothing is copied at all.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nabla/distributed/process_group.h"
#include "nabla/nn/module.h"

namespace nabla::distributed {

struct DdpOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  // Allow parameters that get no gradient in a backward pass (their bucket slots count as zero).
  // Without it such a parameter is an error naming it: usually a bug in the model.
  bool find_unused_parameters = false;
  // Copy rank 0's buffers (BatchNorm running statistics) to every rank at the end of each
  // training backward, so every rank ends the step with the same statistics and evaluation sees
  // them everywhere. One coalesced broadcast per dtype, queued behind the last gradient bucket.
  // It goes after the whole backward because a checkpointed segment's recompute updates the
  // statistics again there. Turn off for models without buffers that matter.
  bool broadcast_buffers = true;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return module_; }
  // Runs the module's forward (after syncing buffers from rank 0 when training).
  Tensor operator()(const Tensor& x);

  // Within this scope backward passes only accumulate gradients locally (gradient
  // accumulation); the first backward after it averages everything accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Copies rank 0's buffers (BatchNorm running statistics) to every rank, now.
  void broadcast_buffers();

  // The parameter names of each bucket, in launch order (for tests and logs).
  std::vector<std::vector<std::string>> bucket_layout() const;

  struct State;

 private:
  nn::Module& module_;
  std::shared_ptr<State> state_;  // hooks hold it weakly, so they outlive us harmlessly
};

// For GradScalerOptions::reduce_found_inf: every rank's inf/NaN flag becomes the sum over ranks,
// nonzero (or NaN) if any rank's gradients overflowed, so all ranks skip the step (or take it)
// together.
//   amp::GradScaler scaler({.reduce_found_inf = distributed::agree_found_inf(group)});
std::function<void(Tensor&)> agree_found_inf(ProcessGroup& group);

}  // namespace nabla::distributed
