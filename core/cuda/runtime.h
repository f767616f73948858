// Public header. The CUDA device runtime, in plain C++ (no CUDA headers), so that code outside
// cuda/ folders can ask about devices. In a build without CUDA, is_available() is false,
// device_count() is 0, and everything else throws a "built without CUDA" error.
#pragma once

#include <cstddef>

#include "nabla/core/allocator.h"

namespace nabla::cuda {

// True when nabla was built with CUDA and a driver reports at least one device.
bool is_available();
int device_count();
int current_device();
void set_device(int index);
// Waits for all work on the current device.
void synchronize();

// The allocator that tensors on cuda:index use.
Allocator& device_allocator(int index);

// Copies nbytes between any two devices (host memory is Device::cpu()). Returns when the copy
// is complete, so the host may read or reuse the buffers at once.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void memset_zero(void* dst, Device device, size_t nbytes);

}  // namespace nabla::cuda
