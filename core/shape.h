// Public header. Sizes, strides, broadcasting and memory formats.
//
// Strides are in elements. A memory format is a stride order, as in PyTorch: channels_last is
// NHWC storage of a logically NCHW tensor, strides (H*W*C, 1, W*C, C).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nabla {

using Shape = std::vector<int64_t>;

enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, Preserve };

int64_t numel_of(const Shape& sizes);
std::string shape_str(const Shape& sizes);  // "[2, 3, 4]"

// Row-major strides for `sizes`.
Shape contiguous_strides(const Shape& sizes);
// NHWC strides for a 4-d NCHW shape.
Shape channels_last_strides(const Shape& sizes);
Shape strides_for(const Shape& sizes, MemoryFormat format);

bool is_contiguous_strides(const Shape& sizes, const Shape& strides);
bool is_channels_last_strides(const Shape& sizes, const Shape& strides);
// True when the elements cover one dense block with no gaps and no overlap, in any order.
bool is_non_overlapping_and_dense(const Shape& sizes, const Shape& strides);

// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// The broadcast of two shapes (numpy rules); throws naming `op` and both shapes on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace nabla
