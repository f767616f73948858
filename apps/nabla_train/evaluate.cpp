// Validation: top-1, top-5 and the mean loss over the validation set (or --eval-batches of it).
// Top-k without a sort: a sample is in the top k when fewer than k logits beat the true class's
// logit. Counts stay on the device until the end, and under DDP they are summed over ranks.
#include "nabla/amp/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/logging.h"
#include "nabla/distributed/process_group.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/loss.h"
#include "nabla/ops/reduce.h"
#include "nabla_train/job.h"

namespace nabla::train {

Tensor Job::eval_logits(const Tensor& input) {
  for (;;) {
    try {
      amp::Autocast autocast(device, amp_dtype, amp_dtype != kFloat32);
      const int64_t n = input.size(0);
      const int parts = static_cast<int>(std::min<int64_t>(eval_split, n));
      if (parts == 1) return model->forward(input).to(kFloat32);  // not through DDP: no gradients to sync
      TensorList pieces;
      for (int64_t start = 0, i = 0; i < parts; ++i) {
        const int64_t size = n / parts + (i < n % parts ? 1 : 0);
        pieces.push_back(model->forward(input.narrow(0, start, size)).to(kFloat32));
        start += size;
      }
      return cat(pieces, 0);
    } catch (const OutOfMemoryError&) {
      if (!splitter || eval_split >= input.size(0)) throw;
      eval_split *= 2;
      if (device.is_cuda()) cuda::empty_cache();
      logger().warn("out of memory in evaluation; evaluating each batch in {} parts from now on", eval_split);
    }
  }
}

EvalResult Job::evaluate() {
  model->eval();
  NoGradGuard no_grad;
  // [top-1 hits, top-5 hits, summed loss, samples], float64 so counts stay exact.
  Tensor totals = zeros({4}, {.dtype = kFloat64, .device = device});
  int64_t batches = 0;
  val_batches->start_epoch(0);
  while (auto batch = val_batches->next()) {
    const Tensor logits = eval_logits(batch->input);
    const Tensor& target = batch->target;
    const Tensor true_logit = gather(logits, 1, target.unsqueeze(1));
    const Tensor beaten_by = sum(gt(logits, true_logit).to(kFloat32), {1});
    const Tensor loss = cross_entropy(logits, target, {.reduction = Reduction::Sum});
    const Tensor row =
        stack({sum(lt(beaten_by, 1.0)).to(kFloat64), sum(lt(beaten_by, 5.0)).to(kFloat64), loss.to(kFloat64),
               full({}, static_cast<double>(target.size(0)), {.dtype = kFloat64, .device = device})});
    totals.add_(row);
    if (options.eval_batches > 0 && ++batches >= options.eval_batches) break;
  }
  if (group) group->allreduce(totals, distributed::ReduceOp::sum)->wait();
  const Tensor host = totals.cpu();
  const double* t = host.data_ptr<double>();
  model->train();
  EvalResult result;
  result.samples = static_cast<int64_t>(t[3]);
  if (result.samples == 0) return result;
  result.top1 = t[0] / t[3];
  result.top5 = t[1] / t[3];
  result.loss = t[2] / t[3];
  return result;
}

}  // namespace nabla::train
