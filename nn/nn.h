// Public header. The nn library: Module, containers, layers, initializers and models.
#pragma once

#include "nabla/nn/attention.h"
#include "nabla/nn/checkpoint.h"
#include "nabla/nn/containers.h"
#include "nabla/nn/graphed_step.h"
#include "nabla/nn/init.h"
#include "nabla/nn/layers.h"
#include "nabla/nn/models/gpt2.h"
#include "nabla/nn/models/llama.h"
#include "nabla/nn/models/mobilenet.h"
#include "nabla/nn/models/resnet.h"
#include "nabla/nn/models/small_cnn.h"
#include "nabla/nn/models/vit.h"
#include "nabla/nn/module.h"
#include "nabla/nn/vision_blocks.h"
