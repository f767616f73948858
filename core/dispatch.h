// Public header. The one place a front end chooses its backend: nabla::dispatch.
//
//   nabla::dispatch("my_op", x, [&] { my_op_cpu(x, y); }, [&] { my_op_cuda(x, y); });
//
// Note [One backend dispatch]: every front end (the ops, the optimizers' and the scaler's fused
// paths, the data path's normalize) runs its kernels through dispatch(op, t, cpu, cuda), which
// calls `cpu` or `cuda` by the device of `t`. In a build without CUDA the CUDA branch is an
// `if constexpr` whose statement is discarded: the `cuda` lambda is still compiled at its call
// site, so a call that no longer matches its declaration in a cuda/*.h header breaks every build
// and not only the CUDA one; but nothing calls it, so the CUDA entry points need no definition
// there. That is why there are no hand-kept stand-in files: three of them drifted from the
// headers they mirrored and broke the CPU-only build. Reaching the CUDA branch in such a build
// raises one clear error, from built_without_cuda().
#pragma once

#include <utility>

#include "nabla/core/deferred.h"
#include "nabla/core/device.h"
#include "nabla/core/profiler.h"
#include "nabla/core/tensor.h"
#include "nabla_generated/config.h"

namespace nabla {

// Whether this build has the CUDA backend (cmake's NABLA_CUDA).
inline constexpr bool kHasCuda = NABLA_HAS_CUDA != 0;

// The error for a CUDA device reaching `op` in a build without CUDA.
[[noreturn]] void built_without_cuda(const char* op);

namespace detail {
template <bool kFlush, class Cpu, class Cuda>
decltype(auto) dispatch_to(const char* op, const Device& device, Cpu&& cpu, Cuda&& cuda) {
  const profiler::detail::Scope timed(op, device.is_cuda() ? device.index : -1);  // core/profiler.h
  if (device.is_cuda()) {
    if constexpr (kHasCuda) {
      if constexpr (kFlush) {
        flush_deferred();
        const detail::InsideDispatch inside;  // ops inside the body launch at once
        return std::forward<Cuda>(cuda)();
      } else {
        return std::forward<Cuda>(cuda)();
      }
    } else {
      built_without_cuda(op);
    }
  }
  return std::forward<Cpu>(cpu)();
}
}  // namespace detail

// Runs `cpu()` on a CPU device and `cuda()` on a CUDA one, and returns what it returns (both
// must return the same type). Note [One backend dispatch]. On CUDA it first runs the pointwise
// launches a compiled step holds back (Note [Deferred launches] in core/deferred.h), so the op
// reads what they write.
template <class Cpu, class Cuda>
decltype(auto) dispatch(const char* op, const Device& device, Cpu&& cpu, Cuda&& cuda) {
  return detail::dispatch_to<true>(op, device, std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
}

// The same, by the device of `on`.
template <class Cpu, class Cuda>
decltype(auto) dispatch(const char* op, const Tensor& on, Cpu&& cpu, Cuda&& cuda) {
  return dispatch(op, on.device(), std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
}

// For the pointwise front ends only (unary, binary, where), whose CUDA branch offers the op to
// the step compiler's recorder before launching it: no flush, so a chain of them stays held.
template <class Cpu, class Cuda>
decltype(auto) dispatch_pointwise(const char* op, const Tensor& on, Cpu&& cpu, Cuda&& cuda) {
  return detail::dispatch_to<false>(op, on.device(), std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
}

// For queries of host-side state that launch nothing (the allocator's counters): no flush, so
// asking how much memory is in use, as NABLA_SAVED_REPORT does after every backward node, does
// not cut the step compiler's regions into pieces and change what it measures.
template <class Cpu, class Cuda>
decltype(auto) dispatch_query(const char* op, const Device& device, Cpu&& cpu, Cuda&& cuda) {
  return detail::dispatch_to<false>(op, device, std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
}

}  // namespace nabla
