// Public header. How much memory CPU tensors hold now and at most, the CPU counterpart of
// cuda::memory_allocated / max_memory_allocated (memory reports, and tests that check what a
// feature such as gradient checkpointing saves). Counts bytes requested by the CPU allocator.
#pragma once

#include <cstddef>

namespace nabla {

size_t cpu_memory_allocated();
size_t cpu_max_memory_allocated();
void cpu_reset_peak_memory_stats();  // the peak restarts from what is allocated now

}  // namespace nabla
