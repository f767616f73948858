// Public header. Mixed precision: the autocast scope and the gradient scaler.
#pragma once

#include "nabla/amp/autocast.h"
#include "nabla/amp/grad_scaler.h"
