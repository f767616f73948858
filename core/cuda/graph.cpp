// The CUDA side of graph capture (graph.h, detail/backend.h): stream capture into the
// allocator's private pool, instantiation, launch and teardown.
#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/detail/backend.h"

namespace nabla::cuda::backend {

namespace {
cudaStream_t raw(Stream stream) {
  return static_cast<cudaStream_t>(stream.handle());
}
}  // namespace

void begin_capture(Stream stream, uint64_t pool) {
  begin_graph_pool(stream.device(), pool, stream);
  // Thread-local mode: other threads may keep using CUDA while this one captures.
  cudaError_t status = cudaStreamBeginCapture(raw(stream), cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) end_graph_pool(stream.device(), pool);
  NABLA_CUDA_CHECK(status);
}

CapturedGraph end_capture(Stream stream, uint64_t pool) {
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(raw(stream), &graph);
  end_graph_pool(stream.device(), pool);
  NABLA_CUDA_CHECK(status);
  cudaGraphExec_t exec = nullptr;
  status = cudaGraphInstantiate(&exec, graph, 0);
  if (status != cudaSuccess) cudaGraphDestroy(graph);
  NABLA_CUDA_CHECK(status);
  return {graph, exec};
}

void abort_capture(Stream stream, uint64_t pool) {
  cudaGraph_t discarded = nullptr;
  cudaStreamEndCapture(raw(stream), &discarded);
  if (discarded) cudaGraphDestroy(discarded);
  end_graph_pool(stream.device(), pool);
}

void launch(const CapturedGraph& graph, Stream stream) {
  NABLA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.exec), raw(stream)));
}

void destroy(const CapturedGraph& graph) {
  if (graph.exec) NABLA_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph.exec)));
  if (graph.graph) NABLA_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph.graph)));
}

}  // namespace nabla::cuda::backend
