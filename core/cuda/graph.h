// Public header. CUDA graph capture and replay of a sequence of nabla ops.
//
//   nabla::cuda::Graph graph;
//   graph.capture_begin();            // on the current stream (not the legacy NULL stream)
//   auto loss = step(static_inputs);  // ops run once, their kernels are recorded
//   graph.capture_end();
//   for (...) { static_inputs.copy_(next); graph.replay(); }   // same kernels, same memory
//
// While a stream is captured, the caching allocator serves that stream's allocations from a
// private pool that lives as long as the graph, so replays reuse exactly the captured memory and
// nothing on the path calls cudaMalloc or synchronizes. Ops that synchronize (item(), copies to
// the CPU) are not allowed inside a capture; CUDA reports them as capture errors.
//
// Note [Per-step values in a CUDA graph]: a replay launches the captured kernels with the
// arguments they had at capture, so a value that changes from step to step (a scheduled learning
// rate, a Philox offset, an optimizer's step counter) must reach them through device memory. Code
// that captures such a kernel registers an on_replay() hook with the graph under capture: before
// every replay the host runs the hooks on the replay stream, and they write the step's values
// (and advance host-side counters, which the graph cannot). nn::make_graphed_step builds a whole
// training step on this; the optimizers (learning rate, step counts) and the random ops (Philox
// seed and offset) register their hooks themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nabla/core/allocator.h"
#include "nabla/core/cuda/stream.h"

namespace nabla::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void capture_begin(Stream stream = current_stream());
  void capture_end();
  // Runs the replay hooks, then launches the captured work, both on `stream` (by default the
  // stream it was captured on). The graph may run on any stream of its device.
  void replay();
  void replay(Stream stream);
  // Frees the graph and its hooks, and gives its private memory pool back to the allocator's cache.
  void reset();
  bool captured() const { return exec_ != nullptr; }

 private:
  friend void on_replay(std::function<void()> hook);
  friend void on_replay_check(std::function<void()> check);
  friend Stream stream_outside_capture(int device);
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  Stream stream_;
  uint64_t pool_ = 0;
  bool capturing_ = false;
  bool replayed_ = false;
  Stream last_replay_stream_;
  std::vector<std::function<void()>> hooks_;
  std::vector<std::function<void()>> checks_;  // run before any hook; may throw
};

// Whether this thread is capturing a graph (between Graph::capture_begin and capture_end).
bool is_capturing();
// Identifies the capture under way on this thread; 0 when there is none. Ids are never reused.
uint64_t capture_id();
// Registers `hook` with the graph this thread is capturing (Note [Per-step values in a CUDA
// graph]): it runs on the host before each replay, with the replay stream current. Throws
// outside a capture. The graph must not outlive what the hook refers to.
void on_replay(std::function<void()> hook);
// Registers a check that runs before every replay, before any hook: it throws when the graph
// can no longer replay correctly (a constant it holds changed), and then nothing has run.
void on_replay_check(std::function<void()> check);
// A stream of `device` that is not the one this thread is capturing (any pool stream outside a
// capture): its allocations come from the shared pools.
Stream stream_outside_capture(int device);

// Device memory for a value that a replay hook writes and captured kernels read, taken from the
// shared cache through stream_outside_capture() even during a capture. It must not come from the capture's
// private pool: a block the graph's earlier kernels used and freed could be handed out again
// there, and those kernels would overwrite the hook's value before it is read.
DataPtr allocate_outside_capture(int device, size_t nbytes);

// Counts, while it lives, the calls on this thread that make the host wait for a CUDA device:
// stream, event and device synchronizations, and copies to the host (item(), cpu()). A step that
// waits cannot be captured into a graph, so nn::make_graphed_step watches its eager warm-up with
// one. Counters nest; each counts what happens in its own lifetime.
class HostWaitCounter {
 public:
  HostWaitCounter();
  ~HostWaitCounter();
  HostWaitCounter(const HostWaitCounter&) = delete;
  HostWaitCounter& operator=(const HostWaitCounter&) = delete;

  int64_t count() const { return count_; }
  // What waited first ("" when nothing did).
  const std::string& first() const { return first_; }

 private:
  friend void note_host_wait(const char* what);
  HostWaitCounter* outer_;
  int64_t count_ = 0;
  std::string first_;
};

// Called by the runtime where the host waits for the device (see HostWaitCounter).
void note_host_wait(const char* what);

}  // namespace nabla::cuda
