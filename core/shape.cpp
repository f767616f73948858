#include "nabla/core/shape.h"

#include <algorithm>
#include <numeric>

#include "nabla/core/error.h"

namespace nabla {

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string shape_str(const Shape& sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

Shape channels_last_strides(const Shape& sizes) {
  NABLA_CHECK(sizes.size() == 4, "channels_last needs a 4-d (N, C, H, W) shape, got {}", shape_str(sizes));
  int64_t c = std::max<int64_t>(sizes[1], 1), h = std::max<int64_t>(sizes[2], 1),
          w = std::max<int64_t>(sizes[3], 1);
  return {h * w * c, 1, w * c, c};
}

Shape strides_for(const Shape& sizes, MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? channels_last_strides(sizes) : contiguous_strides(sizes);
}

bool is_contiguous_strides(const Shape& sizes, const Shape& strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;  // a size-1 dim's stride never matters
    if (sizes[i] == 0) return true;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

bool is_channels_last_strides(const Shape& sizes, const Shape& strides) {
  if (sizes.size() != 4) return false;
  // Check in NHWC order: C, W, H, N.
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (sizes[d] == 1) continue;
    if (sizes[d] == 0) return true;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

bool is_non_overlapping_and_dense(const Shape& sizes, const Shape& strides) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t d : order) {
    if (sizes[d] == 1) continue;
    if (sizes[d] == 0) return true;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  NABLA_CHECK(dim >= lo && dim <= hi,
              "{}: dim {} is out of range for a tensor of {} dims (expected {} to {})", op, dim, ndim, lo,
              hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    NABLA_CHECK(
        da == db || da == 1 || db == 1,
        "{}: shapes {} and {} cannot be broadcast (dim {} is {} against {}; sizes must match or be 1)", op,
        shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace nabla
