// Shared by the microbenchmarks: the median of CUDA-event-timed runs after a warm-up.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "nabla/core/cuda/stream.h"

namespace nabla::bench {

// Milliseconds per call of fn on the current stream: `warmup` untimed calls, then the median of
// `runs` calls, each timed between two events.
inline double median_ms(const std::function<void()>& fn, int runs, int warmup) {
  cuda::Stream stream = cuda::current_stream();
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    cuda::Event start(true), stop(true);
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    times.push_back(start.elapsed_ms(stop));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace nabla::bench
