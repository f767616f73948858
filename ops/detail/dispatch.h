// Internal. Shared checks for op front ends, and the backend dispatch they all call
// (nabla::dispatch, core/dispatch.h: Note [One backend dispatch]).
#pragma once

#include <functional>
#include <initializer_list>

#include "nabla/core/dispatch.h"
#include "nabla/core/tensor.h"

namespace nabla::ops {

using nabla::dispatch;
using nabla::kHasCuda;

// A stateful family's backend seam (Note [Backend seams] in docs/design/routes.md): Cpu and Cuda
// are its two backend tables. on_backend runs call(table) for `on`'s device, timed as `op`;
// backend_of returns the table of `device` untimed, for asking what it can do. Templates, so a
// build without CUDA never references the CUDA table (Note [One backend dispatch]).
template <const auto& Cpu, const auto& Cuda, class Call>
decltype(auto) on_backend(const char* op, const Tensor& on, Call&& call) {
  return nabla::dispatch(
      op, on, [&]() -> decltype(auto) { return call(Cpu); }, [&]() -> decltype(auto) { return call(Cuda); });
}

template <const auto& Cpu, const auto& Cuda>
const auto& backend_of(const char* op, const Device& device) {
  if (device.is_cuda()) {
    if constexpr (kHasCuda) {
      return Cuda;
    } else {
      built_without_cuda(op);
    }
  }
  return Cpu;
}

// Checks that every defined tensor is on the same device as the first; names `op` and both.
void check_same_device(const char* op, std::initializer_list<std::reference_wrapper<const Tensor>> tensors);
void check_defined(const char* op, const Tensor& t, const char* arg);

}  // namespace nabla::ops
