// The CUDA side of the device runtime (detail/backend.h): devices, and copies ordered on the
// current stream. Device memory lives in memory.cpp.
#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/detail/backend.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/error.h"

namespace nabla::cuda::backend {

int device_count() {
  static const int count = [] {
    int n = 0;
    // No driver or no device is not an error here: it just means no GPU.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

int current_device() {
  int d = 0;
  NABLA_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

namespace {
void check_exists(int device) {
  NABLA_CHECK(device >= 0 && device < device_count(),
              "CUDA device {} does not exist (this machine has {} device(s))", device, device_count());
}
}  // namespace

int checked_device(int device) {
  if (device == -1) return current_device();
  check_exists(device);
  return device;
}

void set_device(int index) {
  check_exists(index);  // -1 is not "the current device" here: setting it would mean nothing
  NABLA_CUDA_CHECK(cudaSetDevice(index));
}

void synchronize() {
  NABLA_CUDA_CHECK(cudaDeviceSynchronize());
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(index);
  // Ordered on the current stream like any kernel. A copy to the host must be complete before
  // the host reads it, so that (and only that) waits; a copy from pageable host memory is staged
  // by the driver before cudaMemcpyAsync returns, so the source may be reused at once.
  Stream stream = current_stream(index);
  auto s = static_cast<cudaStream_t>(stream.handle());
  NABLA_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s));
  if (dst_device.is_cpu()) {
    stream_synchronize(stream);  // the backend's: the public copy_bytes counted this wait already
  } else if (src_device.is_cpu()) {
    // From pinned memory the copy is truly asynchronous: keep the block from reuse until done.
    backend::record_pinned_use(src, stream);
  }
}

void memset_zero(void* dst, Device device, size_t nbytes) {
  if (nbytes == 0) return;
  DeviceGuard guard(device.index);
  auto s = static_cast<cudaStream_t>(current_stream(device.index).handle());
  NABLA_CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, s));
}

}  // namespace nabla::cuda::backend
