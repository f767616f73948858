// CUDA sort and cumulative sum over the rows of contiguous (rows, n) matrices.
//
// Sorting is CUB's segmented radix sort of (value, index) pairs, one segment per row: stable, any
// row length, and its scratch memory comes from the caching allocator (a size query, then the
// sort; no host synchronization). Radix order puts NaNs without the sign bit above +inf, which is
// where PyTorch puts every NaN. Bool rows sort as uint8.
//
// The cumulative sum runs one warp per row: the row goes by in chunks of 32 elements, each chunk
// scanned with warp shuffles and offset by the running total of the chunks before it. A row
// costs n / 32 dependent steps, which for the sizes cumsum serves (sampling over a vocabulary,
// sequence positions) is microseconds.
#include <cub/device/device_segmented_radix_sort.cuh>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/sort/kernels.h"
#include "nabla/ops/factory.h"

namespace nabla::ops::cuda {

namespace {

// The key type CUB's radix sort takes for a stored type: bool as its byte.
template <typename T>
using radix_key_t = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

// The running-sum type: float for 16-bit and float32, double for float64, int64 for the rest.
template <typename T>
using scan_t = std::conditional_t<std::is_same_v<T, double>, double,
                                  std::conditional_t<std::is_floating_point_v<opmath_t<T>>, float, int64_t>>;
template <typename T>
using scan_out_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;

constexpr int kScanWarps = 8;  // rows per block

template <typename T>
__global__ void __launch_bounds__(kScanWarps * 32)
    cumsum_kernel(const T* __restrict__ x, scan_out_t<T>* __restrict__ out, int64_t rows, int64_t n,
                  bool reverse) {
  using A = scan_t<T>;
  const int64_t row = int64_t{blockIdx.x} * kScanWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* in = x + row * n;
  scan_out_t<T>* o = out + row * n;
  A carry = A(0);
  for (int64_t base = 0; base < n; base += 32) {
    const int64_t k = base + lane;
    const int64_t j = reverse ? n - 1 - k : k;
    A v = k < n ? static_cast<A>(load_as_opmath(in[j])) : A(0);
    for (int offset = 1; offset < 32; offset *= 2) {  // inclusive scan across the warp
      const A up = __shfl_up_sync(0xffffffffu, v, offset);
      if (lane >= offset) v += up;
    }
    if (k < n) o[j] = store_from<scan_out_t<T>>(carry + v);
    carry += __shfl_sync(0xffffffffu, v, 31);
  }
}

}  // namespace

void sort_rows(const Tensor& x, bool descending, const Tensor& values, const Tensor& indices) {
  const int64_t rows = x.size(0), n = x.size(1);
  NABLA_CHECK(rows * n < (int64_t{1} << 31), "sort: CUDA sorts fewer than 2^31 elements at once, got {} x {}",
              rows, n);
  DeviceScope device(x.device().index);
  const cudaStream_t stream = stream_for(x);
  const TensorOptions on_device{.dtype = kInt64, .device = x.device()};
  // Each row's element indices 0..n-1, and the segment offsets 0, n, 2n, ...
  const Tensor positions = arange(static_cast<double>(n), on_device).expand({rows, n}).contiguous();
  const Tensor offsets = arange(0.0, static_cast<double>(rows * n + 1), static_cast<double>(n),
                                {.dtype = kInt32, .device = x.device()});
  const int* begin = static_cast<const int*>(offsets.data_ptr());
  dispatch_device<TypeSet::All>(x.dtype(), "sort", [&]<typename T>() {
    using K = radix_key_t<T>;
    const K* keys_in = static_cast<const K*>(x.data_ptr());
    K* keys_out = static_cast<K*>(values.data_ptr());
    const int64_t* idx_in = static_cast<const int64_t*>(positions.data_ptr());
    int64_t* idx_out = static_cast<int64_t*>(indices.data_ptr());
    const int items = static_cast<int>(rows * n), segments = static_cast<int>(rows);
    auto run = [&](void* scratch, size_t& bytes) {
      return descending ? cub::DeviceSegmentedRadixSort::SortPairsDescending(
                              scratch, bytes, keys_in, keys_out, idx_in, idx_out, items, segments, begin,
                              begin + 1, 0, sizeof(K) * 8, stream)
                        : cub::DeviceSegmentedRadixSort::SortPairs(scratch, bytes, keys_in, keys_out, idx_in,
                                                                   idx_out, items, segments, begin, begin + 1,
                                                                   0, sizeof(K) * 8, stream);
    };
    size_t bytes = 0;
    NABLA_CUDA_CHECK(run(nullptr, bytes));
    const Tensor scratch =
        Tensor::empty({static_cast<int64_t>(bytes)}, {.dtype = kUInt8, .device = x.device()});
    NABLA_CUDA_CHECK(run(scratch.data_ptr(), bytes));
  });
}

void cumsum_rows(const Tensor& x, bool reverse, const Tensor& out) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0 || n == 0) return;
  DeviceScope device(x.device().index);
  const int64_t blocks = (rows + kScanWarps - 1) / kScanWarps;
  NABLA_CHECK(blocks < (int64_t{1} << 31), "cumsum: {} rows are too many for one launch", rows);
  dispatch_device<TypeSet::All>(x.dtype(), "cumsum", [&]<typename T>() {
    cumsum_kernel<T><<<static_cast<unsigned>(blocks), kScanWarps * 32, 0, stream_for(x)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<scan_out_t<T>*>(out.data_ptr()), rows, n, reverse);
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
