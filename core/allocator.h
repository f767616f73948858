// Public header. Allocator: where Storage gets its bytes.
//
// An allocator returns a DataPtr, a move-only owner that knows how to give the bytes back
// (to the OS, to a cache, or nowhere for borrowed memory). The CPU allocator aligns to 64 bytes
// so that vector loads never split a cache line. CUDA allocators live in core/cuda.
#pragma once

#include <cstddef>
#include <utility>

#include "nabla/core/device.h"

namespace nabla {

class DataPtr {
 public:
  using Deleter = void (*)(void* context, void* data);

  DataPtr() = default;
  DataPtr(void* data, void* context, Deleter deleter, Device device)
      : data_(data), context_(context), deleter_(deleter), device_(device) {}
  DataPtr(DataPtr&& other) noexcept { *this = std::move(other); }
  DataPtr& operator=(DataPtr&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      context_ = std::exchange(other.context_, nullptr);
      deleter_ = std::exchange(other.deleter_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  ~DataPtr() { reset(); }

  void* get() const { return data_; }
  Device device() const { return device_; }
  void reset() {
    if (deleter_) deleter_(context_, data_);
    data_ = context_ = nullptr;
    deleter_ = nullptr;
  }

 private:
  void* data_ = nullptr;
  void* context_ = nullptr;
  Deleter deleter_ = nullptr;
  Device device_;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual DataPtr allocate(size_t nbytes) = 0;
};

inline constexpr size_t kCpuAlignment = 64;

// The process-wide 64-byte-aligned CPU allocator.
Allocator& cpu_allocator();
// The allocator for `device`: the CPU allocator, or the current CUDA allocator of that device.
Allocator& allocator_for(Device device);

}  // namespace nabla
