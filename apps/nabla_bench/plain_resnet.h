// `nabla-bench train --plain`: ResNet-50 as torchvision writes it, with plain layers only:
// relu(bn(conv(x))), a residual add, a ReLU (no fused entry point, none of the model zoo's
// hand-fused calls). Its parameter names are torchvision's (and the model zoo's), so it loads
// the same state dicts. It measures what the framework does for a model nobody hand-fused.
#pragma once

#include <memory>
#include <string>

#include "nabla/nn/module.h"

namespace nabla::bench {

// resnet50, resnet101 or resnet152 (the bottleneck ResNets), written plainly.
std::shared_ptr<nn::Module> plain_resnet(const std::string& arch, int64_t num_classes = 1000);

}  // namespace nabla::bench
