// Public header. The autocast state: whether ops run in lower precision, for which device
// type and in which dtype. Per thread, as grad mode is. Users write the RAII guard
// nabla::amp::Autocast (amp/autocast.h); op front ends read this state through the policy in
// ops/detail/autocast_policy.h. See docs/design/amp.md.
//
// The state also owns the per-scope cast cache: a float32 leaf parameter cast to the lower
// dtype is remembered until the outermost autocast scope exits, so each weight is cast once
// per step however many times it is used. The cache holds plain Tensors; ops fills it.
#pragma once

#include <cstdint>
#include <optional>

#include "nabla/core/device.h"
#include "nabla/core/dtype.h"
#include "nabla/core/tensor.h"

namespace nabla::autocast {

struct State {
  bool enabled = false;
  DeviceType device_type = DeviceType::CUDA;
  DType dtype = kFloat16;  // the lower-precision dtype (float16 or bfloat16)
};

// This thread's current state.
State current();
// Replaces this thread's state (the guard saves and restores it).
void set_current(const State& state);

// Scope depth bookkeeping: enter() on every guard's construction, exit() on its destruction;
// the cast cache is cleared when the depth returns to zero (the outermost scope ends).
void enter_scope();
void exit_scope();
// The guard calls this for each scope that enables autocast.
void note_enabled_scope(DType dtype);
int scope_depth();

// The lower dtype of the last enabled scope entered on this thread (GradScaler warns when it
// is bfloat16, which needs no loss scaling); nullopt before any. enabled_scope_count() counts
// the enabled scopes entered on this thread so far, so a caller can tell whether one was
// entered since some point.
std::optional<DType> last_enabled_dtype();
uint64_t enabled_scope_count();

// ---- the cast cache (used by ops/autocast_policy.cpp) ----
// The cached cast of `source` to `dtype` recorded with grad mode `with_grad`, or an undefined
// tensor. A hit needs the same source tensor at the same version (an in-place update of the
// weight inside the scope makes a new cast).
Tensor cached_cast(const Tensor& source, DType dtype, bool with_grad);
void store_cast(const Tensor& source, DType dtype, bool with_grad, const Tensor& cast);
// Activations (any other tensor) go to a second cache that does not keep the source alive (Note
// [Activation casts] in core/autocast.cpp): a hit needs the source still held by someone and
// unchanged; its entry (and the cast it holds) goes once the source is freed.
Tensor cached_activation_cast(const Tensor& source, DType dtype, bool with_grad);
void store_activation_cast(const Tensor& source, DType dtype, bool with_grad, const Tensor& cast);
// Number of entries of the weights' cache (tests check that each weight is cast once).
int64_t cast_cache_size();
void clear_cast_cache();

}  // namespace nabla::autocast
