// Opens libcublasLt / libcublas on first use; see cublas_library.h for why they are not linked.
//
// The library is looked up as the dynamic linker would have found it had it been linked
// (LD_LIBRARY_PATH, the executable's RUNPATH, the ld.so cache), then in the toolkit's library
// directory this build was configured with. The handle is never closed: cuBLAS handles and
// their workspaces live until the process exits (see handles.h).
#include "nabla/core/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {

// The soname matching the headers this file was compiled against, e.g. "libcublasLt.so.13".
std::string soname(const char* stem) {
  return fmt::format("lib{}.so.{}", stem, CUBLAS_VER_MAJOR);
}

void* open_library(const char* stem) {
  const std::string name = soname(stem);
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library) return library;
  const char* reason = dlerror();
  const std::string first_error = reason ? reason : "unknown reason";
#ifdef NABLA_CUDA_LIBRARY_DIR
  const std::string fallback = std::string(NABLA_CUDA_LIBRARY_DIR) + "/" + name;
  library = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library) return library;
#endif
  NABLA_CHECK(false,
              "cannot load {} ({}), which nabla opens for its first matrix product on a GPU; it ships "
              "with the CUDA toolkit: put its directory on LD_LIBRARY_PATH or in the ld.so cache",
              name, first_error);
  return nullptr;
}

// Resolves `name` in `library` into `slot`, keeping the slot's exact function type.
template <typename Fn>
void resolve(void* library, const char* stem, const char* name, Fn& slot) {
  slot = reinterpret_cast<Fn>(dlsym(library, name));
  NABLA_CHECK(slot != nullptr, "{} has no symbol {}: nabla was built against cuBLAS {} headers", soname(stem),
              name, CUBLAS_VER_MAJOR);
}

CublasLtApi load_cublaslt() {
  constexpr const char* kStem = "cublasLt";
  void* library = open_library(kStem);
  CublasLtApi api{};
  resolve(library, kStem, "cublasLtCreate", api.cublasLtCreate);
  resolve(library, kStem, "cublasLtGetStatusString", api.cublasLtGetStatusString);
  resolve(library, kStem, "cublasLtMatmul", api.cublasLtMatmul);
  resolve(library, kStem, "cublasLtMatmulAlgoGetHeuristic", api.cublasLtMatmulAlgoGetHeuristic);
  resolve(library, kStem, "cublasLtMatmulDescCreate", api.cublasLtMatmulDescCreate);
  resolve(library, kStem, "cublasLtMatmulDescDestroy", api.cublasLtMatmulDescDestroy);
  resolve(library, kStem, "cublasLtMatmulDescSetAttribute", api.cublasLtMatmulDescSetAttribute);
  resolve(library, kStem, "cublasLtMatmulPreferenceCreate", api.cublasLtMatmulPreferenceCreate);
  resolve(library, kStem, "cublasLtMatmulPreferenceDestroy", api.cublasLtMatmulPreferenceDestroy);
  resolve(library, kStem, "cublasLtMatmulPreferenceSetAttribute", api.cublasLtMatmulPreferenceSetAttribute);
  resolve(library, kStem, "cublasLtMatrixLayoutCreate", api.cublasLtMatrixLayoutCreate);
  resolve(library, kStem, "cublasLtMatrixLayoutDestroy", api.cublasLtMatrixLayoutDestroy);
  resolve(library, kStem, "cublasLtMatrixLayoutSetAttribute", api.cublasLtMatrixLayoutSetAttribute);
  return api;
}

CublasApi load_cublas() {
  constexpr const char* kStem = "cublas";
  void* library = open_library(kStem);
  CublasApi api{};
  resolve(library, kStem, "cublasCreate_v2", api.cublasCreate_v2);
  resolve(library, kStem, "cublasSetStream_v2", api.cublasSetStream_v2);
  return api;
}

}  // namespace

const CublasLtApi& cublaslt_api() {
  static const CublasLtApi api = load_cublaslt();  // a failed load throws, and the next call retries
  return api;
}

const CublasApi& cublas_api() {
  static const CublasApi api = load_cublas();
  return api;
}

}  // namespace nabla::cuda
