// Public header. Storage: a refcounted buffer on one device, shared by a tensor and its views.
//
// The version counter lives here so that every view of the same memory sees in-place writes:
// autograd compares it against the version recorded when a tensor was saved for backward.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "nabla/core/allocator.h"

namespace nabla {

class Storage {
 public:
  Storage(DataPtr data, size_t nbytes) : data_(std::move(data)), nbytes_(nbytes) {}
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device) {
    return std::make_shared<Storage>(allocator_for(device).allocate(nbytes), nbytes);
  }

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return data_.device(); }

  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  DataPtr data_;
  size_t nbytes_;
  std::atomic<uint32_t> version_{0};
};

}  // namespace nabla
