// Public header. The step compiler's switch: pointwise fusion for a block of code (a training
// step), used by nn::make_graphed_step when its options ask for it (fuse = true).
//
//   {
//     nb::FusionScope fuse;           // pointwise CUDA ops from here on are recorded...
//     auto y = nb::gelu(x + b) * s;   // ...and run as one generated kernel when y is needed
//   }                                 // (or here, at the latest)
//
// Inside a scope, chains of pointwise ops on CUDA tensors (unary and binary ops, where, dtype
// casts) are recorded instead of launched; when an op that is not pointwise needs their results,
// each chain of one shape runs as one kernel generated as CUDA C++ and compiled with NVRTC,
// writing only the values something still holds (Note [The step compiler] in
// docs/design/step-compiler.md). Results are bitwise those of eager mode (but for a batch norm's
// relu(bn(x) + z), rounded once where eager rounds twice). Without NVRTC, or for
// a kernel that does not compile, the ops run unfused after one warning naming the cause. On the
// CPU, and with NABLA_FUSION=0 in the environment, a scope does nothing.
#pragma once

#include <memory>
#include <optional>

#include "nabla/core/deferred.h"

namespace nabla {

struct FusionStats {
  int flushes = 0;            // times held ops were run
  int recorded_ops = 0;       // ops recorded
  int fused_kernels = 0;      // generated kernels launched
  int fused_ops = 0;          // ops those kernels computed
  int fused_reductions = 0;   // sums and means computed in the kernel of their input
  int eager_ops = 0;          // recorded ops run by their own kernels (alone, or not fusible)
  int fallbacks = 0;          // fused groups run unfused because their kernel could not be had
  int dead_ops = 0;           // recorded ops whose results nothing read: never run
  int recomputed_values = 0;  // saved values kept as the ops computing them, run again in the backward
  int folded_relus = 0;       // ReLUs (forward) and their backwards (masks) run by a batch norm's kernels
  int compiled = 0;           // kernel programs compiled with NVRTC (a cold cache)
  int from_disk = 0;          // kernel programs read from the disk cache
  double compile_s = 0;       // seconds spent compiling
};

// What NABLA_FUSION says: false for "0", "off" or "false" (every scope is then inert), true for
// "1", "on" or "true" (nn::make_graphed_step then fuses whatever its options say), nothing when
// unset or anything else.
std::optional<bool> fusion_environment();
// Whether NABLA_FUSION leaves fusion on (it does not say false).
inline bool fusion_enabled_by_environment() {
  return fusion_environment().value_or(true);
}

class FusionScope {
 public:
  // enabled = false (or NABLA_FUSION=0) makes an inert scope, so callers need no branch.
  explicit FusionScope(bool enabled = true);
  // Runs what is still held; a failure there is thrown (unless the scope is left by another
  // exception), so no value the held ops were to write is read unwritten.
  ~FusionScope() noexcept(false);
  FusionScope(const FusionScope&) = delete;
  FusionScope& operator=(const FusionScope&) = delete;

  bool active() const { return recorder_ != nullptr; }
  // Runs what is held now.
  void flush();
  // Counts so far (what has been flushed).
  FusionStats stats() const;

 private:
  std::unique_ptr<DeferredLaunches> recorder_;
  DeferredLaunches* previous_ = nullptr;
};

}  // namespace nabla
