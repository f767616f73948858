// Internal (core). The CUDA side of the device runtime: what the public functions of
// core/cuda/runtime.h, stream.h, memory.h, pinned_allocator.h and graph.h do in a build with
// CUDA. Plain C++ declarations (handles are void*), defined in the CUDA-only sources of core/cuda
// (runtime.cpp, stream.cpp, memory.cpp, pinned_allocator.cpp, graph.cpp).
//
// Note [The runtime's two sides]: the public functions are defined once, in core/cuda/api.cpp,
// which every build compiles. Each one gives its no-device answer (no devices, no memory in use,
// nothing pinned) or raises built_without_cuda() in a build without CUDA, and calls in here in a
// build with it, from an `if constexpr (kHasCuda)` branch (Note [One backend dispatch]). A build
// without CUDA compiles those calls but never makes them, so it needs no definitions, and no file
// stands in for the CUDA sources: the stand-in that used to (runtime_without_cuda.cpp) is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nabla/core/allocator.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/pinned_allocator.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/memory_category.h"

namespace nabla::cuda::backend {

// Devices and copies (runtime.cpp).
int device_count();
int current_device();
// `device` checked to exist; -1 is the current device.
int checked_device(int device);
void set_device(int index);
void synchronize();
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void memset_zero(void* dst, Device device, size_t nbytes);

// Streams (stream.cpp).
bool stream_query(Stream stream);
void stream_synchronize(Stream stream);
Stream current_stream(int device);
Stream default_stream(int device);
void set_current_stream(Stream stream);
Stream stream_from_pool(int device, bool high_priority);

// Events (stream.cpp): a cudaEvent_t as void*.
void* event_create(bool enable_timing);
void event_destroy(void* event);
void event_record(void* event, Stream stream);
void stream_wait_event(Stream stream, void* event);
bool event_query(void* event);
void event_synchronize(void* event);
float event_elapsed_ms(void* start, void* end);

// Device memory (memory.cpp).
Allocator& device_allocator(int index);
size_t memory_allocated(int device);
size_t max_memory_allocated(int device);
size_t memory_reserved(int device);
size_t max_memory_reserved(int device);
void reset_peak_memory_stats(int device);
AllocatorCounts allocator_counts(int device);
void empty_cache();
void set_memory_fraction(double fraction, int device);
std::string allocator_backend();
std::string memory_summary(int device);
std::string memory_snapshot(int device);
void record_stream(const Tensor& t, Stream stream);
MemoryCategoryStats memory_category_stats(int device);
// Private pools for graph capture (Graph, through graph.cpp).
void begin_graph_pool(int device, uint64_t pool, Stream stream);
void end_graph_pool(int device, uint64_t pool);
void release_graph_pool(int device, uint64_t pool, Stream stream);

// Pinned host memory (pinned_allocator.cpp).
Allocator& pinned_allocator();
// Host memory the device can write through the same pointer (cudaHostAllocMapped), zeroed, kept
// for the process (Note [Checks on the device] in core/cuda/device_checks.h).
void* alloc_mapped_host(size_t nbytes);
bool is_pinned(const void* ptr);
void record_pinned_use(const void* ptr, Stream stream);
PinnedStats pinned_stats();
void pinned_empty_cache();

// Graph capture (graph.cpp): a cudaGraph_t and its cudaGraphExec_t as void*.
struct CapturedGraph {
  void* graph = nullptr;
  void* exec = nullptr;
};
// Starts capturing `stream` into the private pool `pool` (thread-local capture mode).
void begin_capture(Stream stream, uint64_t pool);
// Ends the capture and instantiates it; the pool stops taking allocations either way.
CapturedGraph end_capture(Stream stream, uint64_t pool);
// Ends a capture that will not be used, discarding what it recorded.
void abort_capture(Stream stream, uint64_t pool);
void launch(const CapturedGraph& graph, Stream stream);
void destroy(const CapturedGraph& graph);

}  // namespace nabla::cuda::backend
