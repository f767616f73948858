// Public header. The umbrella: #include <nabla/nabla.h> for the whole public API.
#pragma once

#include "nabla/amp/amp.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/device.h"
#include "nabla/core/dtype.h"
#include "nabla/core/error.h"
#include "nabla/core/generator.h"
#include "nabla/core/io/safetensors.h"
#include "nabla/core/tensor.h"
#include "nabla/data/data.h"
#include "nabla/distributed/distributed.h"
#include "nabla/nn/nn.h"
#include "nabla/ops/ops.h"
#include "nabla/optim/optim.h"
