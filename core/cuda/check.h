// Internal (cuda/ only). One status check for every CUDA runtime, cuBLAS and cuDNN call (NCCL's
// checks in distributed/ go through the same throw_library_error): a failure throws
// nabla::Error naming the library, the call, the file and line, and the library's explanation.
// NABLA_CUDA_CHECK_LAUNCH() follows every kernel launch.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace nabla::cuda {
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_library_error(const char* library, const char* call, const char* file, int line,
                                      int code, const char* message);
}  // namespace nabla::cuda

#define NABLA_CUDA_CHECK(call) ::nabla::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define NABLA_CUBLAS_CHECK(call) ::nabla::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define NABLA_CUDNN_CHECK(call) ::nabla::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
#define NABLA_CUDA_CHECK_LAUNCH() \
  ::nabla::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
