// Public header. How much memory CPU tensors hold now and at most, the CPU counterpart of
// cuda::memory_allocated / max_memory_allocated (memory reports, and tests that check what a
// feature such as gradient checkpointing saves). Counts bytes requested by the CPU allocator.
//
// set_cpu_memory_limit caps those bytes: an allocation that would take cpu_memory_allocated()
// past the limit throws nabla::OutOfMemoryError, as a full GPU would. This is how CI injects an
// out-of-memory into real training steps without a GPU (the OOM-split policy and the automatic
// batch size are tested this way). Per-category counts are in core/memory_category.h.
#pragma once

#include <cstddef>

namespace nabla {

size_t cpu_memory_allocated();
size_t cpu_max_memory_allocated();
void cpu_reset_peak_memory_stats();  // the peak restarts from what is allocated now

// Caps the CPU allocator at `bytes` (0 removes the cap, the default). Bytes already allocated are
// not touched, even above a new, lower cap; only new allocations are refused.
void set_cpu_memory_limit(size_t bytes);
size_t cpu_memory_limit();  // 0 when unlimited

}  // namespace nabla
