// Public header. Everything in nabla::optim: optimizers, schedulers, clipping and the EMA.
#pragma once

#include "nabla/optim/adam.h"
#include "nabla/optim/clip.h"
#include "nabla/optim/ema.h"
#include "nabla/optim/lars.h"
#include "nabla/optim/optimizer.h"
#include "nabla/optim/scheduler.h"
#include "nabla/optim/sgd.h"
