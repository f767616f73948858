// Public header. Finite-difference gradient checks, for tests of ops and custom Functions.
//
//   auto x = nabla::randn({3, 4}, {.dtype = nabla::kFloat64, .requires_grad = true});
//   EXPECT_TRUE(nabla::gradcheck([](const TensorList& in) { return nabla::tanh(in[0]); }, {x}));
//
// For each of a few random cotangents v, it compares v . J from backward() with the central
// difference (f(x + eps e_i) - f(x - eps e_i)) . v / (2 eps), element by element of every input
// that requires grad. Inputs should be float64. The result says which input and element failed.
#pragma once

#include <functional>
#include <string>

#include "nabla/core/tensor.h"

namespace nabla {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  int num_directions = 2;  // random cotangents tried
  uint64_t seed = 0;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // what failed, when !ok
  explicit operator bool() const { return ok; }
};

GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          GradcheckOptions options = {});

}  // namespace nabla
