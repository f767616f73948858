// cuBLAS and cuBLASLt are opened on first use, not at process start (core/cuda/cublas_library.h):
// a process that never multiplies matrices on a GPU must not pay libcublasLt's ~0.4 s load.
// Needs the libraries, not a GPU, so it runs in CI too.
#include "nabla_generated/config.h"

#if NABLA_HAS_CUDA

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "nabla/core/cuda/cublas_library.h"
#include "test_util.h"

namespace nabla {
namespace {

// True when a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

// Runs in a fresh process (the "threadsafe" death-test style re-executes the binary for this test
// alone), so no earlier test can have opened the libraries. Exits 0, or with the failed step.
[[noreturn]] void open_and_check() {
  auto fail = [](int code, const char* why) {
    std::fprintf(stderr, "%s\n", why);
    std::exit(code);
  };
  if (mapped("libcublasLt.so") || mapped("libcublas.so")) fail(1, "cuBLAS was loaded at process start");
  const cuda::CublasLtApi& lt = cuda::cublaslt_api();
  if (!mapped("libcublasLt.so")) fail(2, "cublaslt_api() did not load libcublasLt");
  if (mapped("libcublas.so")) fail(3, "cublaslt_api() loaded the classic libcublas too");
  // The table calls into the real library: its status text is cuBLAS's own wording.
  const std::string text = lt.cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  if (text.find("not supported") == std::string::npos) fail(4, "unexpected cuBLASLt status text");
  if (&cuda::cublaslt_api() != &lt) fail(5, "a second call opened the library again");
  const cuda::CublasApi& classic = cuda::cublas_api();
  if (!mapped("libcublas.so") || classic.cublasCreate_v2 == nullptr ||
      classic.cublasSetStream_v2 == nullptr) {
    fail(6, "cublas_api() did not load libcublas");
  }
  std::exit(0);
}

TEST(CublasLibrary, OpensOnFirstUseNotAtProcessStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(open_and_check(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace nabla

#endif  // NABLA_HAS_CUDA
