// The model, optimizer and learning-rate schedule of a nabla-train run, built from the recipe.
#pragma once

#include <memory>

#include "nabla/nn/module.h"
#include "nabla/optim/optimizer.h"
#include "nabla/optim/scheduler.h"
#include "nabla_train/options.h"

namespace nabla::train {

// A ResNet or the small CNN, with `channels` input channels and `num_classes` outputs. The
// ResNets take the CIFAR-style stem (3x3 stride-1 conv1, no max-pool) for images below 64
// pixels, where the ImageNet stem would shrink 28x28 to 7x7 before the first block.
std::shared_ptr<nn::Module> make_model(const TrainOptions& options, const Recipe& recipe, int64_t channels,
                                       int64_t num_classes);

// SGD (momentum, nesterov), AdamW or LARS over the model's parameters; with --no-bn-weight-decay,
// BN parameters and biases go to a second group without weight decay.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& options, const Recipe& recipe,
                                                 const nn::Module& model);

// The schedule over `steps_per_epoch * epochs` optimizer steps, in steps (so warmup and decay are
// smooth within an epoch), with a linear warmup of --warmup-epochs in front.
std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& options, const Recipe& recipe,
                                                   optim::Optimizer& optimizer, int64_t steps_per_epoch);

}  // namespace nabla::train
