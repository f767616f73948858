// The CUDA device runtime. Device memory here is plain cudaMalloc; the caching allocator
// replaces it (issue: CUDA backend part 1).
#include "nabla/core/cuda/runtime.h"

#include <array>
#include <mutex>

#include "nabla/core/cuda/check.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) [[likely]]
    return;
  cudaGetLastError();  // clear the sticky-free error so the process stays usable
  if (status == cudaErrorMemoryAllocation) {
    throw OutOfMemoryError(
        fmt::format("CUDA out of memory in {} at {}:{}: {}", call, file, line, cudaGetErrorString(status)));
  }
  throw Error(fmt::format("CUDA error in {} at {}:{}: {} ({})", call, file, line, cudaGetErrorString(status),
                          cudaGetErrorName(status)));
}

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

bool is_available() {
  return device_count() > 0;
}

namespace {
void check_index(int index) {
  NABLA_CHECK(index >= 0 && index < device_count(),
              "CUDA device {} does not exist (this machine has {} device(s))", index, device_count());
}
}  // namespace

int current_device() {
  int d = 0;
  NABLA_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  check_index(index);
  NABLA_CUDA_CHECK(cudaSetDevice(index));
}

void synchronize() {
  NABLA_CUDA_CHECK(cudaDeviceSynchronize());
}

namespace {
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) : previous_(current_device()) {
    if (index != previous_) NABLA_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

class PlainDeviceAllocator final : public Allocator {
 public:
  explicit PlainDeviceAllocator(int index) : index_(index) {}
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, Device::cuda(index_));
    DeviceGuard guard(index_);
    void* p = nullptr;
    NABLA_CUDA_CHECK(cudaMalloc(&p, nbytes));
    return DataPtr(
        p, this, [](void*, void* data) { cudaFree(data); }, Device::cuda(index_));
  }

 private:
  int index_;
};
}  // namespace

Allocator& device_allocator(int index) {
  check_index(index);
  static std::array<std::unique_ptr<PlainDeviceAllocator>, 128> allocators;
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i) allocators[i] = std::make_unique<PlainDeviceAllocator>(i);
  });
  return *allocators[index];
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(index);
  NABLA_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
}

void memset_zero(void* dst, Device device, size_t nbytes) {
  if (nbytes == 0) return;
  DeviceGuard guard(device.index);
  NABLA_CUDA_CHECK(cudaMemset(dst, 0, nbytes));
}

}  // namespace nabla::cuda
