// Internal (cuda/ only). The per-device context: cuBLAS, cuBLASLt and cuDNN handles, one per
// (device, thread), bound to the thread's current stream when fetched, and cuBLASLt workspaces
// per (device, stream). Handles come from a per-device pool: a thread takes one on first use
// and gives it back when it exits; handles are never destroyed (destroying them during process
// teardown, after the CUDA context is gone, crashes).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>

namespace nabla::cuda {

cublasHandle_t cublas_handle();      // current device, bound to current_stream()
cublasLtHandle_t cublaslt_handle();  // current device
cudnnHandle_t cudnn_handle();        // current device, bound to current_stream()

struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};
// A cuBLASLt workspace for the current device and stream (kept for reuse).
Workspace cublaslt_workspace();

}  // namespace nabla::cuda
