// The autocast guard: validates, then saves and restores the thread's state (core/autocast.h).
#include "nabla/amp/autocast.h"

#include "nabla/core/error.h"

namespace nabla::amp {

Autocast::Autocast(Device device, DType dtype, bool enabled) : previous_(autocast::current()) {
  if (enabled) {
    NABLA_CHECK(dtype == kFloat16 || dtype == kBFloat16,
                "amp::Autocast: the lower-precision dtype must be float16 or bfloat16, got {}",
                dtype_name(dtype));
    // The CPU kernels compute float16 in float32 anyway, and float16's narrow range would
    // only add overflow; bfloat16 keeps float32's range.
    NABLA_CHECK(device.is_cuda() || dtype == kBFloat16,
                "amp::Autocast: on the CPU autocast runs in bfloat16 only, got {} (use nabla::kBFloat16)",
                dtype_name(dtype));
  }
  autocast::enter_scope();
  if (enabled) autocast::note_enabled_scope(dtype);
  autocast::set_current(enabled ? autocast::State{.enabled = true, .device_type = device.type, .dtype = dtype}
                                : autocast::State{.enabled = false,
                                                  .device_type = previous_.device_type,
                                                  .dtype = previous_.dtype});
}

Autocast::~Autocast() {
  autocast::set_current(previous_);
  autocast::exit_scope();  // the outermost scope clears the cast cache
}

bool is_autocast_enabled(Device device) {
  const autocast::State s = autocast::current();
  return s.enabled && s.device_type == device.type;
}

DType autocast_dtype() {
  return autocast::current().dtype;
}

}  // namespace nabla::amp
