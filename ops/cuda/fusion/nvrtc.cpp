// NVRTC opened on first use (nvrtc.h): the library is looked up as the dynamic linker would find
// it, then in the toolkit this build was configured with, and never closed.
#include "nabla/ops/cuda/fusion/nvrtc.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "nabla/core/error.h"
#include "nabla/ops/cuda/fusion/embedded.h"
#include "nabla/ops/fusion/codegen.h"

namespace nabla::ops::cuda::fusion {

namespace {

struct NvrtcApi {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
};

std::string soname() {
  return fmt::format("libnvrtc.so.{}", CUDART_VERSION / 1000);
}

void* open_nvrtc() {
  const std::string name = soname();
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library) return library;
  const char* reason = dlerror();
  const std::string first_error = reason ? reason : "unknown reason";
#ifdef NABLA_CUDA_LIBRARY_DIR
  library = dlopen((std::string(NABLA_CUDA_LIBRARY_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library) return library;
#endif
  NABLA_CHECK(false,
              "cannot load {} ({}), which the step compiler uses to compile fused kernels; it ships with the "
              "CUDA toolkit: put its directory on LD_LIBRARY_PATH, or turn fusion off (NABLA_FUSION=0)",
              name, first_error);
  return nullptr;
}

template <typename Fn>
void resolve(void* library, const char* symbol, Fn& slot) {
  slot = reinterpret_cast<Fn>(dlsym(library, symbol));
  NABLA_CHECK(slot != nullptr, "{} has no symbol {}: nabla was built against CUDA {}.{}", soname(), symbol,
              CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
}

const NvrtcApi& api() {
  static const NvrtcApi loaded = [] {
    void* library = open_nvrtc();
    NvrtcApi a;
    resolve(library, "nvrtcVersion", a.version);
    resolve(library, "nvrtcGetErrorString", a.error_string);
    resolve(library, "nvrtcCreateProgram", a.create);
    resolve(library, "nvrtcDestroyProgram", a.destroy);
    resolve(library, "nvrtcCompileProgram", a.compile);
    resolve(library, "nvrtcGetProgramLogSize", a.log_size);
    resolve(library, "nvrtcGetProgramLog", a.log);
    resolve(library, "nvrtcGetCUBINSize", a.cubin_size);
    resolve(library, "nvrtcGetCUBIN", a.cubin);
    return a;
  }();
  return loaded;
}

void check(nvrtcResult result, const char* what) {
  NABLA_CHECK(result == NVRTC_SUCCESS, "NVRTC: {} failed: {}", what, api().error_string(result));
}

// What the formulas need of the standard headers, under their names: NVRTC has none of its own.
// NAN is the quiet NaN the host's <cmath> gives the eager kernels.
constexpr const char* kStdCmath = R"(#pragma once
#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
)";
constexpr const char* kStdCstdint = R"(#pragma once
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
namespace std { using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t;
using ::uint16_t; using ::uint32_t; using ::uint64_t; }
)";
constexpr const char* kStdLimits = "#pragma once\n";
constexpr const char* kStdTypeTraits = R"(#pragma once
namespace std {
template <class T, class U> inline constexpr bool is_same_v = false;
template <class T> inline constexpr bool is_same_v<T, T> = true;
template <class T> inline constexpr bool is_floating_point_v =
    is_same_v<T, float> || is_same_v<T, double> || is_same_v<T, long double>;
template <class T> inline constexpr bool is_unsigned_v =
    is_same_v<T, bool> || is_same_v<T, unsigned char> || is_same_v<T, unsigned short> ||
    is_same_v<T, unsigned int> || is_same_v<T, unsigned long> || is_same_v<T, unsigned long long>;
}
)";

struct Headers {
  std::vector<const char*> names, texts;
};

const Headers& headers() {
  static const Headers h = [] {
    Headers out;
    const auto add = [&out](const char* name, const char* text) {
      out.names.push_back(name);
      out.texts.push_back(text);
    };
    add("cmath", kStdCmath);
    add("cstdint", kStdCstdint);
    add("limits", kStdLimits);
    add("type_traits", kStdTypeTraits);
    for (const EmbeddedHeader& e : embedded_headers()) add(e.name, e.text);
    return out;
  }();
  return h;
}

// -default-device: the formulas' NABLA_HOST_DEVICE functions are device functions here.
const std::vector<std::string>& base_options() {
  static const std::vector<std::string> options = {"--std=c++20", "-default-device", "--fmad=false"};
  return options;
}

}  // namespace

const std::string& nvrtc_unavailable_reason() {
  static const std::string reason = []() -> std::string {
    try {
      (void)api();
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  }();
  return reason;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(api().version(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

uint64_t toolchain_hash() {
  static const uint64_t hash = [] {
    uint64_t h = ops::fusion::fnv1a("nabla fusion toolchain");
    const Headers& hs = headers();
    for (size_t k = 0; k < hs.names.size(); ++k) {
      h = ops::fusion::fnv1a(hs.names[k], h);
      h = ops::fusion::fnv1a(hs.texts[k], h);
    }
    for (const std::string& option : base_options()) h = ops::fusion::fnv1a(option, h);
    return h;
  }();
  return hash;
}

std::string compile_to_cubin(const std::string& source, int arch) {
  const NvrtcApi& nvrtc = api();
  const Headers& hs = headers();
  nvrtcProgram program = nullptr;
  check(nvrtc.create(&program, source.c_str(), "nabla_fused.cu", static_cast<int>(hs.names.size()),
                     hs.texts.data(), hs.names.data()),
        "nvrtcCreateProgram");
  struct Destroy {
    const NvrtcApi& nvrtc;
    nvrtcProgram& program;
    ~Destroy() { nvrtc.destroy(&program); }
  } destroy{nvrtc, program};

  std::vector<std::string> options = base_options();
  options.push_back(fmt::format("--gpu-architecture=sm_{}", arch));
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult compiled = nvrtc.compile(program, static_cast<int>(argv.size()), argv.data());
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (nvrtc.log_size(program, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      nvrtc.log(program, log.data());
      log.resize(size - 1);
    }
    NABLA_CHECK(false, "NVRTC could not compile a generated kernel for sm_{} ({}):\n{}", arch,
                nvrtc.error_string(compiled), log);
  }
  size_t size = 0;
  check(nvrtc.cubin_size(program, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check(nvrtc.cubin(program, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace nabla::ops::cuda::fusion
