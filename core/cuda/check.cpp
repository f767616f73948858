#include "nabla/core/cuda/check.h"

#include <cstring>

#include "nabla/core/cuda/cublas_library.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {
const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throw_library_error(const char* library, const char* call, const char* file, int line, int code,
                         const char* message) {
  throw Error(
      fmt::format("{} error {} in {} at {}:{}: {}", library, code, call, base_name(file), line, message));
}

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) [[likely]]
    return;
  cudaGetLastError();  // clear a non-sticky error so the process stays usable
  if (status == cudaErrorMemoryAllocation) {
    throw OutOfMemoryError(fmt::format("CUDA out of memory in {} at {}:{}: {}", call, base_name(file), line,
                                       cudaGetErrorString(status)));
  }
  throw_library_error("CUDA", call, file, line, static_cast<int>(status),
                      fmt::format("{} ({})", cudaGetErrorString(status), cudaGetErrorName(status)).c_str());
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  // cuBLASLt is loaded by now: only a call into it can have returned this status.
  throw_library_error("cuBLAS", call, file, line, static_cast<int>(status),
                      cublaslt_api().cublasLtGetStatusString(status));
}

void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  throw_library_error("cuDNN", call, file, line, static_cast<int>(status), cudnnGetErrorString(status));
}

}  // namespace nabla::cuda
