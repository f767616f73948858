// CUDA index_select, gather, index_add, index_copy and scatter_add, and the index range check on the device
// (Note [Checks on the device] in core/cuda/device_checks.h): the kernels skip an index outside
// the indexed dim (a selection writes zero), so a bad index the check reports later never reads
// or writes outside a tensor.
//
// All five walk one iteration space (index_select: the output; index_add and index_copy: the source;
// gather/scatter_add: the index) with three operands addressed by strides: a destination, a
// source and the index. The indexed dim has stride 0 for the operand it indexes into; that
// operand's offset gains index * stride(dim) instead. So one kernel serves every layout: dims
// are coalesced where all three operands allow it, and a linear position is split into
// coordinates with precomputed 32-bit divisions when the space fits in int32.
//
// index_add and scatter_add accumulate with atomicAdd (native for float32/64, float16 and
// bfloat16 on sm_90, int32 and int64; a compare-and-swap on the enclosing word for uint8), so
// repeated indices sum in an unspecified order: floating results may differ from the CPU's in
// rounding.
#include <algorithm>

#include "nabla/core/cuda/device_checks.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/indexing/kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr int kMaxDims = 16;

// n / d and n % d for a fixed d: 32-bit with a multiply-high (Granlund-Montgomery; valid for
// n < 2^31), 64-bit with plain division.
template <typename Index>
struct Divider;

template <>
struct Divider<uint32_t> {
  uint32_t divisor = 1, magic = 0, shift = 0;
  Divider() = default;
  explicit Divider(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint32_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

template <>
struct Divider<uint64_t> {
  uint64_t divisor = 1;
  Divider() = default;
  explicit Divider(uint64_t d) : divisor(d) {}
  __device__ __forceinline__ uint64_t div(uint64_t n) const { return n / divisor; }
};

// The iteration space and the three operands' strides in it, innermost dim last.
struct Geometry {
  int dims = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[3][kMaxDims];  // 0: destination, 1: source, 2: index
};

template <typename Index>
struct Indexer {
  int dims;
  Divider<Index> sizes[kMaxDims];
  int64_t strides[3][kMaxDims];

  explicit Indexer(const Geometry& g) : dims(g.dims) {
    for (int d = 0; d < dims; ++d) {
      sizes[d] = Divider<Index>(static_cast<Index>(g.sizes[d]));
      for (int k = 0; k < 3; ++k) strides[k][d] = g.strides[k][d];
    }
  }
  __device__ __forceinline__ void offsets(Index linear, int64_t (&off)[3]) const {
    off[0] = off[1] = off[2] = 0;
#pragma unroll 4
    for (int d = dims - 1; d >= 0; --d) {
      const Index q = sizes[d].div(linear);
      const int64_t coord = static_cast<int64_t>(linear - q * sizes[d].divisor);
      linear = q;
      off[0] += coord * strides[0][d];
      off[1] += coord * strides[1][d];
      off[2] += coord * strides[2][d];
    }
  }
};

// Merges neighbouring dims that every operand walks as one, and drops size-1 dims.
Geometry coalesce(const Shape& sizes, const std::array<Shape, 3>& strides) {
  Geometry g;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (g.dims > 0) {
      const int last = g.dims - 1;
      bool merge = true;
      for (int k = 0; k < 3; ++k) merge = merge && strides[k][d] * sizes[d] == g.strides[k][last];
      if (merge) {
        g.sizes[last] *= sizes[d];
        for (int k = 0; k < 3; ++k) g.strides[k][last] = strides[k][d];
        continue;
      }
    }
    NABLA_CHECK(g.dims < kMaxDims, "indexing: tensors of more than {} dims are not supported on CUDA",
                kMaxDims);
    g.sizes[g.dims] = sizes[d];
    for (int k = 0; k < 3; ++k) g.strides[k][g.dims] = strides[k][d];
    ++g.dims;
  }
  return g;
}

// Per-element atomic adds. uint8 has no atomicAdd: a compare-and-swap loop on the aligned word.
template <typename T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
    const unsigned shift = (reinterpret_cast<uintptr_t>(p) & 3) * 8;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const unsigned sum = ((assumed >> shift) + v) & 0xffu;
      old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (sum << shift));
    } while (old != assumed);
  } else {
    atomicAdd(p, v);
  }
}

// What a thread does with its element: Select reads the indexed source (dst[off0] =
// src[off1 + index * dim_stride]); Add and Copy write the indexed destination (dst[off0 + index *
// dim_stride] += or = src[off1]).
enum class Mode { Select, Add, Copy };

template <typename T, typename Index, Mode M>
__global__ void __launch_bounds__(256)
    indexed_kernel(T* __restrict__ dst, const T* __restrict__ src, const int64_t* __restrict__ index,
                   Indexer<Index> indexer, Index numel, int64_t dim_stride, int64_t bound) {
  for (Index n = blockIdx.x * Index{blockDim.x} + threadIdx.x; n < numel;
       n += Index{gridDim.x} * blockDim.x) {
    int64_t off[3];
    indexer.offsets(n, off);
    const int64_t i = index[off[2]];
    const bool valid = i >= 0 && i < bound;
    const int64_t at = i * dim_stride;
    if constexpr (M == Mode::Add) {
      if (valid) atomic_add(dst + off[0] + at, src[off[1]]);
    } else if constexpr (M == Mode::Copy) {
      if (valid) dst[off[0] + at] = src[off[1]];
    } else {
      dst[off[0]] = valid ? src[off[1] + at] : T{};
    }
  }
}

// Storage-only element types: selection moves bytes, so it dispatches on the item size.
template <size_t Bytes>
struct Bits;
template <>
struct Bits<1> {
  using type = uint8_t;
};
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

template <typename T, Mode M>
void launch_typed(const Tensor& dst, const Tensor& src, const Tensor& index, const Geometry& g, int64_t numel,
                  int64_t dim_stride, int64_t bound) {
  if (numel == 0) return;
  const cudaStream_t stream = stream_for(dst);
  auto* d = static_cast<T*>(dst.data_ptr());
  const auto* s = static_cast<const T*>(src.data_ptr());
  const auto* i = index.data_ptr<int64_t>();
  if (numel < (int64_t{1} << 31)) {
    indexed_kernel<T, uint32_t, M><<<blocks_for(numel, 4), kBlockSize, 0, stream>>>(
        d, s, i, Indexer<uint32_t>(g), static_cast<uint32_t>(numel), dim_stride, bound);
  } else {
    indexed_kernel<T, uint64_t, M><<<blocks_for(numel, 4), kBlockSize, 0, stream>>>(
        d, s, i, Indexer<uint64_t>(g), static_cast<uint64_t>(numel), dim_stride, bound);
  }
  NABLA_CUDA_CHECK_LAUNCH();
}

// Strides of `t` over the iteration space, with `dim` zeroed (the index supplies it).
Shape strides_without(const Tensor& t, int64_t dim) {
  Shape s(t.strides());
  if (!s.empty()) s[dim] = 0;
  return s;
}

// The index's strides over the iteration space: 1-d indices walk `dim` only.
Shape strides_of_1d_index(const Tensor& index, int64_t ndim, int64_t dim) {
  Shape s(ndim, 0);
  s[dim] = index.dim() == 0 ? 0 : index.stride(0);
  return s;
}

// Moves elements (Select or Copy) by their size: no arithmetic, so any dtype.
template <Mode M>
void move(const char* op, const Tensor& out, const Tensor& x, const Tensor& index, const Geometry& g,
          int64_t numel, int64_t dim_stride, int64_t bound) {
  switch (x.itemsize()) {
    case 1:
      return launch_typed<Bits<1>::type, M>(out, x, index, g, numel, dim_stride, bound);
    case 2:
      return launch_typed<Bits<2>::type, M>(out, x, index, g, numel, dim_stride, bound);
    case 4:
      return launch_typed<Bits<4>::type, M>(out, x, index, g, numel, dim_stride, bound);
    case 8:
      return launch_typed<Bits<8>::type, M>(out, x, index, g, numel, dim_stride, bound);
    default:
      NABLA_ASSERT(false, "{}: item size {}", op, x.itemsize());
  }
}

void accumulate(const char* op, const Tensor& out, const Tensor& src, const Tensor& index, const Geometry& g,
                int64_t numel, int64_t dim_stride, int64_t bound) {
  dispatch_device<TypeSet::FloatingAndIntegral>(out.dtype(), op, [&]<typename T>() {
    launch_typed<T, Mode::Add>(out, src, index, g, numel, dim_stride, bound);
  });
}

// The size of the indexed dim: what an index must stay below.
int64_t bound_of(const Tensor& t, int64_t dim) {
  return t.dim() == 0 ? 1 : t.size(dim);
}

__global__ void __launch_bounds__(256)
    check_indices_kernel(const int64_t* __restrict__ index, int64_t numel, int64_t bound,
                         nabla::cuda::DeviceCheckRecord* record, int check) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < numel;
       n += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = index[n];
    if ((i < 0 || i >= bound) && atomicCAS(&record->failed, 0u, 1u) == 0u) {
      record->check = check;
      record->value = static_cast<long long>(i);
    }
  }
}

}  // namespace

void check_indices(const Tensor& index, int64_t bound, const std::string& message) {
  NABLA_ASSERT(index.dtype() == kInt64, "check_indices of {}", describe(index));
  if (index.numel() == 0) return;
  const Tensor flat = index.contiguous();
  const int check = nabla::cuda::register_device_check(message);
  check_indices_kernel<<<blocks_for(flat.numel(), 4), kBlockSize, 0, stream_for(flat)>>>(
      flat.data_ptr<int64_t>(), flat.numel(), bound, nabla::cuda::device_check_record(), check);
  NABLA_CUDA_CHECK_LAUNCH();
}

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  // Iterates over out: destination out, source x (dim from the index).
  const Geometry g = coalesce(
      out.sizes(), {out.strides(), strides_without(x, dim), strides_of_1d_index(index, out.dim(), dim)});
  move<Mode::Select>("index_select", out, x, index, g, out.numel(), x.stride(dim), bound_of(x, dim));
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  // Iterates over index (out has its shape): destination out, source x (dim from the index).
  const Geometry g = coalesce(index.sizes(), {out.strides(), strides_without(x, dim), index.strides()});
  move<Mode::Select>("gather", out, x, index, g, index.numel(), x.stride(dim), bound_of(x, dim));
}

void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source) {
  // Iterates over source: destination out (dim from the index), source source.
  const Geometry g = coalesce(source.sizes(), {strides_without(out, dim), source.strides(),
                                               strides_of_1d_index(index, source.dim(), dim)});
  accumulate("index_add", out, source, index, g, source.numel(), out.stride(dim), bound_of(out, dim));
}

void index_copy_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source) {
  // As index_add_, with stores: of repeated entries an unspecified one's slice stays.
  const Geometry g = coalesce(source.sizes(), {strides_without(out, dim), source.strides(),
                                               strides_of_1d_index(index, source.dim(), dim)});
  move<Mode::Copy>("index_copy", out, source, index, g, source.numel(), out.stride(dim), bound_of(out, dim));
}

void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  // Iterates over index: destination out (dim from the index), source src.
  const Geometry g = coalesce(index.sizes(), {strides_without(out, dim), src.strides(), index.strides()});
  accumulate("scatter_add", out, src, index, g, index.numel(), out.stride(dim), bound_of(out, dim));
}

}  // namespace nabla::ops::cuda
