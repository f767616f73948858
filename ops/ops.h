// Public header. Every tensor operation.
#pragma once

#include "nabla/ops/autograd/engine.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/autograd/gradcheck.h"
#include "nabla/ops/copy.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/linalg.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/softmax.h"
#include "nabla/ops/view.h"
