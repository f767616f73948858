// Internal (data/cuda). The part of nvJPEG's C API the GPU decoder uses (gpu_jpeg.h), declared
// here and opened with dlopen on first use. nvJPEG ships with the CUDA toolkit and beside
// PyTorch's and torchvision's wheels, but not in Debian's packages nor in every toolkit install,
// so nabla neither includes nvjpeg.h nor links the library: a machine without it decodes on the
// CPU, with one logged line (Note [GPU decode fallbacks] in docs/design/data.md).
//
// The declarations follow nvJPEG's documented C API, stable since CUDA 11: the enum values, the
// nvjpegImage_t and allocator structs, and the signatures of the functions resolved below.
#pragma once

#include <cstddef>
#include <string>

namespace nabla::data::cuda::nvjpeg {

// nvjpegStatus_t.
enum Status : int {
  kSuccess = 0,
  kNotInitialized = 1,
  kInvalidParameter = 2,
  kBadJpeg = 3,
  kJpegNotSupported = 4,
  kAllocatorFailure = 5,
  kExecutionFailed = 6,
  kArchMismatch = 7,
  kInternalError = 8,
  kImplementationNotSupported = 9,
  kIncompleteBitstream = 10,
};
const char* status_name(int status);

// nvjpegBackend_t.
enum Backend : int {
  kBackendDefault = 0,
  kBackendHybrid = 1,
  kBackendGpuHybrid = 2,
  kBackendHardware = 3,
};

// nvjpegOutputFormat_t: RGBI is interleaved RGB in channel[0], pitch[0] bytes a row.
enum OutputFormat : int {
  kOutputRgbi = 5,
};

constexpr int kMaxComponents = 4;

// nvjpegImage_t.
struct Image {
  unsigned char* channel[kMaxComponents];
  size_t pitch[kMaxComponents];
};

// nvjpegDevAllocator_t: cudaMalloc- and cudaFree-like callbacks, returning 0 on success.
struct DeviceAllocator {
  int (*dev_malloc)(void** pointer, size_t bytes);
  int (*dev_free)(void* pointer);
};

struct HandleImpl;
struct StateImpl;
struct StreamImpl;
using Handle = HandleImpl*;      // nvjpegHandle_t
using State = StateImpl*;        // nvjpegJpegState_t
using JpegStream = StreamImpl*;  // nvjpegJpegStreamHandle_t
using CudaStream = void*;        // cudaStream_t

struct Api {
  int (*create_ex)(Backend backend, DeviceAllocator* device_allocator, void* pinned_allocator, unsigned flags,
                   Handle* handle);
  int (*destroy)(Handle handle);
  int (*state_create)(Handle handle, State* state);
  int (*state_destroy)(State state);
  int (*batched_initialize)(Handle handle, State state, int batch_size, int max_cpu_threads,
                            OutputFormat format);
  int (*decode_batched)(Handle handle, State state, const unsigned char* const* data, const size_t* lengths,
                        Image* destinations, CudaStream stream);
  int (*decode)(Handle handle, State state, const unsigned char* data, size_t length, OutputFormat format,
                Image* destination, CudaStream stream);
  int (*stream_create)(Handle handle, JpegStream* stream);
  int (*stream_destroy)(JpegStream stream);
  int (*stream_parse)(Handle handle, const unsigned char* data, size_t length, int save_metadata,
                      int save_stream, JpegStream stream);
  int (*batched_supported)(Handle handle, JpegStream stream, int* is_supported);  // 0: supported
  int (*get_property)(int type, int* value);  // libraryPropertyType: 0 major, 1 minor, 2 patch
};

// The loaded library, or nullptr when it cannot be had (unavailable_reason() says why). The
// library is looked up as NABLA_NVJPEG names it (a path), else as libnvjpeg.so.<this build's CUDA
// major> and libnvjpeg.so through the dynamic linker, else in the CUDA toolkit this build was
// configured with. It is never closed.
const Api* api();
const std::string& unavailable_reason();
// "12.9.0": the loaded library's version, or "" when it is unavailable.
std::string version();

}  // namespace nabla::data::cuda::nvjpeg
