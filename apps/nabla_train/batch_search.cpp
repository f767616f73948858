// --batch-size auto: trial training steps on random batches find the largest batch that fits in
// this process's memory (the GPU, capped by --memory-fraction). The trials update the real model
// with a throwaway optimizer, so the weights and BN statistics are saved first and put back after.
#include "nabla/apps/train_support/batch_size_finder.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/logging.h"
#include "nabla/distributed/process_group.h"
#include "nabla/ops/factory.h"
#include "nabla_train/job.h"
#include "nabla_train/setup.h"

namespace nabla::train {

void Job::find_batch_size() {
  std::map<std::string, Tensor> saved;
  {
    NoGradGuard no_grad;
    for (const auto& [key, value] : model->state_dict()) saved[key] = value.clone();
  }
  auto scratch_optimizer = make_optimizer(options, recipe, *model);
  const int64_t side = recipe.image_size;
  auto trial = [&](int64_t batch) {
    scratch_optimizer->zero_grad();
    const Tensor x = randn({batch, data.channels, side, side}, {.device = device}).contiguous(memory_format);
    const Tensor y = randint(0, data.num_classes, {batch}, {.dtype = kInt64, .device = device});
    forward_backward(x, y, 1.0);
    scratch_optimizer->step();
    scratch_optimizer->zero_grad();
    if (device.is_cuda()) cuda::synchronize();  // an asynchronous failure shows here, inside the trial
  };
  const int64_t max_batch = std::min<int64_t>(4096, train_sampler->size());
  const auto found =
      train_support::find_batch_size(trial, {.max_batch = max_batch, .start = 8, .device = device});
  {
    NoGradGuard no_grad;
    model->load_state_dict(saved, /*strict=*/true);
  }
  scratch_optimizer.reset();
  if (device.is_cuda()) {
    cuda::empty_cache();
    cuda::reset_peak_memory_stats(device.index);
  }
  // The trial step is the edge: the loader's prefetched device batches, EMA weights and
  // fragmentation over a long run need room too, so train 10% below it (in multiples of 8).
  const int64_t with_headroom = found.batch >= 16 ? (found.batch * 9 / 10) / 8 * 8 : found.batch;
  recipe.batch_size = with_headroom;
  if (group) {  // every rank must train the same batch: the smallest that fits everywhere
    Tensor b = full({1}, static_cast<double>(found.batch), {.dtype = kFloat64, .device = device});
    group->allreduce(b, distributed::ReduceOp::min)->wait();
    recipe.batch_size = static_cast<int64_t>(b.item<double>());
  }
  recipe.batch_size_auto = false;
  if (options.lr_scale_batch > 0) {
    recipe.lr *= static_cast<double>(recipe.batch_size * world_size * options.grad_accum_steps) /
                 static_cast<double>(options.lr_scale_batch);
  }
  logger().info(
      "--batch-size auto: training at batch {} ({} fit in a trial step; 10% is left for prefetched "
      "batches and fragmentation)",
      recipe.batch_size, found.batch);
}

}  // namespace nabla::train
