// Public header. Where a step's time goes, op by op: every op that runs through
// nabla::dispatch (core/dispatch.h), and every backward node, timed on the device with CUDA
// events and on the host with a steady clock.
//
//   nabla::profiler::start();
//   for (int i = 0; i < 5; ++i) train_step();
//   std::puts(nabla::profiler::table(nabla::profiler::stop()).c_str());
//
// Only the outermost op is timed: an op that calls other ops (linear calling matmul, a backward
// node calling its formulas) owns their time, so the rows add up to the step. Backward nodes are
// rows of their own, named after their op: "linear (backward)". Each timed op records two events on its
// device's current stream, which costs the host a few microseconds an op: profile to see proportions, and
// time speed without it. While it is off, dispatch pays one relaxed atomic load. Not for use
// during CUDA graph capture (events recorded there cannot be timed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nabla::profiler {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double device_ms = 0;  // summed time between each call's two events (CUDA ops only)
  double host_ms = 0;    // summed wall time of the calls on the host
};

struct Report {
  std::vector<OpTime> ops;  // most device time first (host time for CPU-only runs)
  double span_ms = 0;       // from the first timed op's start to the last one's end, on the device
};

// Starts recording (again, from empty). Throws if it is already recording.
void start();
// Waits for the device to reach the last recorded event and returns the totals. Throws if it
// is not recording.
Report stop();
bool is_recording();

// The report as an aligned text table, with each row's share of the summed device time.
std::string table(const Report& report, size_t max_rows = 40);

namespace detail {
bool active();  // cheap: one relaxed load
// Times the calls between its construction and destruction under `op` when it is the outermost
// scope on this thread and the profiler is recording. `device` is -1 for host-only work.
class Scope {
 public:
  Scope(std::string_view op, int device) {
    if (active()) begin(op, device);
  }
  ~Scope() {
    if (entered_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(std::string_view op, int device);
  void end() noexcept;
  bool entered_ = false;  // counted in this thread's nesting depth
  int64_t call_ = -1;     // this scope's record, when it is the outermost one
  uint64_t session_ = 0;  // the recording it belongs to
};
}  // namespace detail

}  // namespace nabla::profiler
