// Where a training step's time goes, without adding a host synchronization: CUDA events on the
// compute stream at each phase boundary give the device's time per phase (read once, after the
// timed loop), and the host clock gives the time the host took to issue each phase. A phase whose
// host time exceeds its device time is bound by the host; device time between two steps is the
// device idling while the host prepares the next one.
//
//   PhaseTimer timer({"forward", "backward", "optimizer"}, steps);
//   timer.begin_step();  forward...;  timer.mark();  backward...;  timer.mark();  step...;  timer.mark();
//   ...
//   std::puts(timer.report().c_str());   // synchronizes; after the timed loop
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "nabla/core/cuda/stream.h"

namespace nabla::bench {

class PhaseTimer {
 public:
  PhaseTimer(std::vector<std::string> phases, int steps, int device);

  // Starts a step (its first boundary); then call mark() once at the end of each phase.
  void begin_step();
  void mark();

  // Median over steps, in ms: device and host time per phase, and the device gap between steps.
  nlohmann::json summary() const;
  std::string report() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::vector<std::string> phases_;
  int device_;
  int step_ = -1;
  // One row per step, phases + 1 boundaries each.
  std::vector<std::vector<cuda::Event>> events_;
  std::vector<std::vector<Clock::time_point>> host_;
};

}  // namespace nabla::bench
