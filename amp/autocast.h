// Public header. amp::Autocast: the RAII scope in which ops run in mixed precision.
//
//   {
//     nabla::amp::Autocast autocast(nabla::Device::cuda(), nabla::kHalf);   // or kBFloat16
//     auto loss = nabla::cross_entropy(model->forward(images), labels);      // convs in fp16,
//   }                                                                         // the loss in fp32
//
// Inside the scope, conv/matmul/linear/bmm run in the lower dtype, softmax, losses, norms'
// statistics, exp/log/pow and sum/mean in float32, and binary ops promote to the widest input
// (the table is in ops/detail/autocast_policy.h). Parameters stay float32: each is cast once per
// outermost scope (the cast is cached until that scope ends) and its gradient comes back to the
// float32 leaf in float32. Scopes nest; `Autocast(device, dtype, /*enabled=*/false)` turns
// autocast off for an inner region. The state is per thread, and backward runs with autocast off.
// On the CPU only bfloat16 is accepted. See docs/design/amp.md.
#pragma once

#include "nabla/core/autocast.h"
#include "nabla/core/device.h"
#include "nabla/core/dtype.h"

namespace nabla::amp {

class Autocast {
 public:
  // device: the device type whose ops autocast (the index does not matter); dtype: float16 or
  // bfloat16 on CUDA, bfloat16 on the CPU.
  Autocast(Device device, DType dtype, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;
  Autocast(Autocast&&) = delete;
  Autocast& operator=(Autocast&&) = delete;

 private:
  autocast::State previous_;
};

// Whether autocast is on for `device`'s type on this thread, and in which dtype.
bool is_autocast_enabled(Device device);
DType autocast_dtype();

}  // namespace nabla::amp
