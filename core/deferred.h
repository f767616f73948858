// Public header. Launches the step compiler holds back, and when they must run.
//
// Note [Deferred launches]: while a step is compiled (nn::GraphedStepOptions::fuse), pointwise
// ops on CUDA tensors do not launch their kernels: they record themselves, and the recorder
// (ops/fusion/recorder.h) turns the ops recorded since the last flush into fused kernels when
// something needs their results. nabla::dispatch flushes before every op that is not pointwise,
// and so do the runtime's host copies and synchronizations, event records, collectives, and a
// graph capture's start and end and its replays. Held ops run on the stream they were recorded
// on; recording on another stream flushes the held ones first. Code that launches its own kernels on nabla
// tensors without going through nabla::dispatch calls flush_deferred() first; outside a compiled step it does
// nothing.
#pragma once

namespace nabla {

class DeferredLaunches {
 public:
  virtual ~DeferredLaunches() = default;
  // Runs everything held back, in order.
  virtual void flush() = 0;
};

namespace detail {
// The thread's recorder, or null (outside a compiled step).
inline thread_local DeferredLaunches* t_deferred = nullptr;

// How many nabla::dispatch CUDA bodies this thread is inside. Such a body launches its own kernels
// on tensors it may have just made with other ops (GradScaler::unscale_ computes 1 / scale, then
// launches the fused unscale that reads it): the recorder holds nothing back there, or the
// body's own launch would read a value not yet written.
inline thread_local int t_dispatch_depth = 0;
struct InsideDispatch {
  InsideDispatch() { ++t_dispatch_depth; }
  ~InsideDispatch() { --t_dispatch_depth; }
  InsideDispatch(const InsideDispatch&) = delete;
  InsideDispatch& operator=(const InsideDispatch&) = delete;
};
}  // namespace detail

inline void flush_deferred() {
  if (DeferredLaunches* d = detail::t_deferred) d->flush();
}

}  // namespace nabla
