// Internal (core/cuda). The real device behind the caching allocator's DeviceMemory interface:
// cudaMalloc/cudaFree, CUDA events, and driver virtual-memory calls for expandable segments
// (fetched through cudaGetDriverEntryPointByVersion, so nothing links libcuda directly and the
// binaries still load on machines without a driver).
#pragma once

#include <cstddef>
#include <map>

#include "nabla/core/cuda/device_memory.h"

namespace nabla::cuda {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device);

  void* allocate(size_t bytes) override;
  void free(void* ptr, size_t bytes) override;
  size_t total_memory() const override;
  size_t free_memory() const override;

  EventId create_event() override;
  void record_event(EventId event, StreamId stream) override;
  bool query_event(EventId event) override;
  void synchronize_event(EventId event) override;
  void destroy_event(EventId event) override;

  bool supports_expandable() const override { return granularity_ != 0; }
  size_t expandable_granularity() const override { return granularity_; }
  void* reserve_virtual(size_t bytes) override;
  bool map_more(void* base, size_t mapped, size_t bytes) override;
  void unmap_tail(void* base, size_t mapped, size_t bytes) override;
  void release_virtual(void* base, size_t bytes) override;

 private:
  int device_;
  size_t granularity_ = 0;  // 0: no virtual memory management
  size_t total_ = 0;
  // Physical pages mapped into expandable ranges, by address (one handle per page).
  std::map<uintptr_t, unsigned long long> pages_;
};

}  // namespace nabla::cuda
