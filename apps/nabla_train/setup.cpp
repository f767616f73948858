#include "nabla_train/setup.h"

#include <cmath>

#include "nabla/nn/models/mobilenet.h"
#include "nabla/nn/models/resnet.h"
#include "nabla/nn/models/small_cnn.h"
#include "nabla/nn/models/vit.h"
#include "nabla/optim/adam.h"
#include "nabla/optim/lars.h"
#include "nabla/optim/sgd.h"

namespace nabla::train {

std::shared_ptr<nn::Module> make_model(const TrainOptions& o, const Recipe& r, int64_t channels,
                                       int64_t num_classes) {
  if (r.arch == "smallcnn") {
    return std::make_shared<nn::models::SmallCnn>(nn::models::SmallCnnOptions{
        .in_channels = channels, .image_size = r.image_size, .num_classes = num_classes});
  }
  if (r.arch == "mobilenet_v2") {
    return nn::models::mobilenet_v2({.num_classes = num_classes, .in_channels = channels});
  }
  if (r.arch == "mobilenet_v3_large") {
    return nn::models::mobilenet_v3_large({.num_classes = num_classes, .in_channels = channels});
  }
  if (r.arch == "mobilenet_v3_small") {
    return nn::models::mobilenet_v3_small({.num_classes = num_classes, .in_channels = channels});
  }
  if (r.arch == "efficientnet_b0") {
    return nn::models::efficientnet_b0({.num_classes = num_classes, .in_channels = channels});
  }
  if (r.arch == "vit_b_16") {  // resolve_sizes checked that 16 divides the image size
    return nn::models::vit_b_16(
        {.image_size = r.image_size, .num_classes = num_classes, .in_channels = channels});
  }
  const nn::models::ResNetOptions options{.num_classes = num_classes,
                                          .zero_init_residual = o.zero_init_residual,
                                          .in_channels = channels,
                                          .small_input_stem = r.image_size < 64,
                                          .checkpoint_segments = o.grad_checkpoint};
  return nn::models::resnet(r.arch, options);  // the name was checked with the recipe
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, const Recipe& r,
                                                 const nn::Module& model) {
  // By shape, not by name: the 1-d parameters are the biases and the batch, group and layer
  // norms' scales and shifts in every model nabla-train builds (a ResNet's bn1..3 and
  // downsample.1, a MobileNet's features.i.1, a ViT's ln_1 / ln_2).
  const optim::ParamGroupSplit split{.no_weight_decay_on_vectors = o.no_bn_weight_decay};
  auto groups = optim::param_groups(model.named_parameters(), split, r.weight_decay);
  if (o.optimizer == "adamw") {
    return std::make_unique<optim::AdamW>(
        std::move(groups),
        optim::AdamWOptions{.lr = r.lr, .beta1 = o.momentum, .weight_decay = r.weight_decay});
  }
  if (o.optimizer == "lars") {
    return std::make_unique<optim::LARS>(
        std::move(groups),
        optim::LarsOptions{
            .lr = r.lr, .momentum = o.momentum, .weight_decay = r.weight_decay, .nesterov = o.nesterov});
  }
  return std::make_unique<optim::SGD>(
      std::move(groups),
      optim::SgdOptions{
          .lr = r.lr, .momentum = o.momentum, .weight_decay = r.weight_decay, .nesterov = o.nesterov});
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& o, const Recipe& r,
                                                   optim::Optimizer& optimizer, int64_t steps_per_epoch) {
  const int64_t total = std::max<int64_t>(1, steps_per_epoch * r.epochs);
  const int64_t warmup = std::min<int64_t>(
      total - 1, static_cast<int64_t>(std::llround(r.warmup_epochs * static_cast<double>(steps_per_epoch))));
  if (r.lr_schedule == "onecycle")
    return std::make_unique<optim::OneCycleLR>(optimizer, optim::OneCycleLROptions{.total_steps = total});
  if (r.lr_schedule == "cosine") {
    return std::make_unique<optim::CosineLR>(
        optimizer, optim::CosineLROptions{.total_steps = total, .warmup_steps = warmup});
  }
  // The rest decay over the steps after warmup; LinearWarmup shifts them by the warmup.
  std::unique_ptr<optim::LRScheduler> after;
  if (r.lr_schedule == "step") {
    after = std::make_unique<optim::StepLR>(
        optimizer, optim::StepLROptions{.step_size = std::max<int64_t>(1, o.lr_step_epochs * steps_per_epoch),
                                        .gamma = o.lr_step_gamma});
  } else {  // linear: straight to 0; poly: PolynomialLR with power 2 (the LARS recipes' choice)
    after = std::make_unique<optim::PolynomialLR>(
        optimizer, optim::PolynomialLROptions{.total_steps = total - warmup,
                                              .power = r.lr_schedule == "poly" ? 2.0 : 1.0});
  }
  if (warmup == 0) return after;
  return std::make_unique<optim::LinearWarmup>(std::move(after),
                                               optim::LinearWarmupOptions{.warmup_steps = warmup});
}

}  // namespace nabla::train
