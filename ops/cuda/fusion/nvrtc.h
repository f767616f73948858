// Internal (ops/cuda/fusion). Run-time compilation of generated kernels with NVRTC, which ships
// with the CUDA toolkit (libnvrtc.so.13) and is opened on first use, as cuBLAS is
// (core/cuda/cublas_library.h): a machine without it still runs every step, unfused.
#pragma once

#include <cstdint>
#include <string>

namespace nabla::ops::cuda::fusion {

// Why NVRTC cannot be used in this process ("" when it can), found once.
const std::string& nvrtc_unavailable_reason();

// "13.0": NVRTC's version, part of the compiled-kernel cache's key. Throws nabla::Error when
// NVRTC cannot be opened, naming the library and why.
std::string nvrtc_version();

// Compiles `source` (generated kernels including fusion::kPreludeName) to a CUBIN for
// sm_<arch>, e.g. 90. Throws nabla::Error with NVRTC's log when the source does not compile.
std::string compile_to_cubin(const std::string& source, int arch);

// A hash of what every generated kernel is compiled with besides its own source: the embedded
// prelude and formula headers and the options. Part of the cache's key, so a library built from
// changed formulas never loads kernels compiled from the old ones.
uint64_t toolchain_hash();

}  // namespace nabla::ops::cuda::fusion
