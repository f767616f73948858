// Internal (cuda/ only). One status check for every CUDA runtime call: a failure throws
// nabla::Error naming the call, the file and the line, and the runtime's own explanation.
#pragma once

#include <cuda_runtime_api.h>

namespace nabla::cuda {
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
}  // namespace nabla::cuda

#define NABLA_CUDA_CHECK(call) ::nabla::cuda::check_cuda((call), #call, __FILE__, __LINE__)
