// The device runtime of a build without CUDA (-DNABLA_CUDA=OFF): no devices, and a clear error
// for anything that needs one.
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  NABLA_CHECK(false,
              "{}: nabla was built without CUDA (configure with -DNABLA_CUDA=ON on a machine with the CUDA "
              "toolkit); use Device::cpu()",
              what);
  __builtin_unreachable();
}
}  // namespace

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
int current_device() {
  no_cuda("current_device");
}
void set_device(int) {
  no_cuda("set_device");
}
void synchronize() {
  no_cuda("synchronize");
}
Allocator& device_allocator(int) {
  no_cuda("CUDA tensor allocation");
}
void copy_bytes(void*, Device, const void*, Device, size_t) {
  no_cuda("copy to or from a CUDA device");
}
void memset_zero(void*, Device, size_t) {
  no_cuda("memset on a CUDA device");
}

}  // namespace nabla::cuda
