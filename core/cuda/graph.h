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
#pragma once

#include <cstdint>

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
  // Launches the captured work on the capture stream.
  void replay();
  // Frees the graph and gives its private memory pool back to the allocator's cache.
  void reset();
  bool captured() const { return exec_ != nullptr; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  Stream stream_;
  uint64_t pool_ = 0;
  bool capturing_ = false;
};

}  // namespace nabla::cuda
