// Graceful stop on SIGINT / SIGTERM. The first signal only sets a flag; the training loop checks
// it at each step boundary, saves a checkpoint and exits 0. A second signal exits at once (status
// 128 + signal, as a shell reports it) for a run that is stuck. The handler does nothing but an
// atomic store, write(2) of a fixed message and _exit, all async-signal-safe.
//
//   StopSignal stop;                      // installs the handlers; the destructor restores the old ones
//   for (...; ; ++step) {
//     train_step();
//     if (stop.requested()) { save(); fmt::print("stopped by {}\n", signal_name(stop.signal())); return 0; }
//   }
//
// Signal dispositions are process state, so at most one StopSignal exists at a time.
#pragma once

#include <memory>

namespace nabla::train_support {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  bool requested() const;
  int signal() const;  // the first signal received, 0 while none

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

// "SIGINT", "SIGTERM", or "a signal" for any other.
const char* signal_name(int signo);

}  // namespace nabla::train_support
