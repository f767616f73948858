#include "nabla/core/cuda/graph.h"

#include <atomic>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {
std::atomic<uint64_t> next_pool{1};
}  // namespace

Graph::~Graph() {
  try {
    reset();
  } catch (...) {  // destructors must not throw; reset only fails on a broken context
  }
}

void Graph::capture_begin(Stream stream) {
  NABLA_CHECK(!capturing_ && !exec_,
              "Graph::capture_begin: this graph already holds a capture; call reset() first");
  NABLA_CHECK(stream.handle() != nullptr, "Graph::capture_begin: the legacy NULL stream cannot be captured");
  stream_ = stream;
  pool_ = next_pool.fetch_add(1);
  detail::begin_graph_pool(stream.device(), pool_, stream);
  // Thread-local mode: other threads may keep using CUDA while this one captures.
  cudaError_t status =
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream.handle()), cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) detail::end_graph_pool(stream.device(), pool_);
  NABLA_CUDA_CHECK(status);
  capturing_ = true;
}

void Graph::capture_end() {
  NABLA_CHECK(capturing_, "Graph::capture_end: no capture in progress");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &graph);
  detail::end_graph_pool(stream_.device(), pool_);
  NABLA_CUDA_CHECK(status);
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  NABLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void Graph::replay() {
  NABLA_CHECK(exec_ != nullptr, "Graph::replay: nothing was captured");
  NABLA_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_.handle())));
}

void Graph::reset() {
  if (capturing_) {
    cudaGraph_t discarded = nullptr;
    cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &discarded);
    if (discarded) cudaGraphDestroy(discarded);
    detail::end_graph_pool(stream_.device(), pool_);
    capturing_ = false;
  }
  if (exec_) NABLA_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  if (graph_) NABLA_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
  exec_ = graph_ = nullptr;
  if (pool_) {
    // Replays may still run: the pool's blocks are released once the stream is past them.
    detail::release_graph_pool(stream_.device(), pool_, stream_);
    pool_ = 0;
  }
}

}  // namespace nabla::cuda
