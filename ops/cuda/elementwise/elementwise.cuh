// Internal (ops/cuda only). The one launcher behind every elementwise CUDA kernel: unary,
// binary, where, copy and fill all call launch_elementwise().
//
//   launch_elementwise<Out, In...>(out, {&in...}, fn);   // out[i] = fn(in[i]...)
//
// `fn` is a device functor taking the inputs' device storage values (__half, float, bool, ...)
// and returning Out's; it does its own arithmetic type conversions. Inputs broadcast to out.
//
// The host first builds a plan, as ops/cpu/loops.h does: byte strides per operand (0 where an
// input broadcasts), dims ordered by the output's strides (so channels_last outputs iterate in
// NHWC order and writes coalesce) and neighbouring dims merged where every operand is contiguous
// across them. Then one of two kernels runs:
//   * vectorized: the plan is one dense dim for every operand and every pointer is aligned to
//     16-byte vectors (fewer bytes for narrower types, see vector_width). Each thread moves one
//     vector per operand per grid-stride step; the tail that does not fill a vector is done
//     element by element by the thread that owns it.
//   * strided: anything else (transposes, slices, broadcasts, unaligned views). Each thread
//     turns a linear index into per-operand byte offsets. When every offset fits in 31 bits the
//     index math is 32-bit with multiply-shift division (IntDivider), else plain int64, so
//     tensors past 2^31 elements work.
// Kernels run on the output's current stream, never synchronize and allocate nothing.
#pragma once

#include <cuda/std/tuple>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/detail/iteration.h"

namespace nabla::ops::cuda {

// Dims left after merging; more than this is rejected with a clear error.
inline constexpr int kMaxDims = 10;

// Makes `index` the current device for a scope (kernels must launch on their stream's device).
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    NABLA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) NABLA_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceScope() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// Division by a fixed divisor as multiply-high and shift (valid for n, divisor < 2^31).
template <typename Index>
struct IntDivider {
  Index divisor = 1;
  IntDivider() = default;
  explicit IntDivider(Index d) : divisor(d) {}
  __device__ __forceinline__ Index div(Index n) const { return n / divisor; }
};

template <>
struct IntDivider<uint32_t> {
  uint32_t divisor = 1, magic = 1, shift = 0;
  IntDivider() = default;
  explicit IntDivider(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// Linear index -> byte offset of each operand. Dim 0 is the innermost (fastest) dim.
template <int N, typename Index>
struct OffsetCalculator {
  int ndim = 0;
  IntDivider<Index> sizes[kMaxDims];
  Index strides[kMaxDims][N]{};

  __device__ __forceinline__ void get(Index linear, Index (&offsets)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) offsets[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      // The outermost dim takes what is left, with no division.
      Index q = d + 1 < ndim ? sizes[d].div(linear) : Index{0};
      Index r = d + 1 < ndim ? linear - q * sizes[d].divisor : linear;
#pragma unroll
      for (int k = 0; k < N; ++k) offsets[k] += r * strides[d][k];
      linear = q;
    }
  }
};

// Operands after broadcasting and merging: sizes innermost first, byte strides per operand.
template <int N>
struct ElementwisePlan {
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, N> strides;
  std::array<char*, N> data{};
  int64_t numel = 0;
};

// operands[0] is the output; the others broadcast to its shape. The host-side planning is
// shared with the CPU (ops/detail/iteration.h); the device walks dims innermost first, so reverse it.
template <int N>
ElementwisePlan<N> make_plan(const std::array<const Tensor*, N>& operands) {
  IterationPlan<N> shared = plan_iteration<N>(operands);
  ElementwisePlan<N> plan;
  plan.numel = shared.numel;
  plan.data = shared.data;
  plan.sizes.assign(shared.sizes.rbegin(), shared.sizes.rend());
  for (int k = 0; k < N; ++k) plan.strides[k].assign(shared.strides[k].rbegin(), shared.strides[k].rend());
  return plan;
}

// ---- kernels ---------------------------------------------------------------------------------

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Aligned {
  T v[kVec];
};

// A raw type of kBytes bytes, so that a vector load or store is one ld/st.global(.v2/.v4).
template <size_t kBytes>
using RawBits = std::conditional_t<
    kBytes == 16, uint4,
    std::conditional_t<
        kBytes == 8, uint2,
        std::conditional_t<kBytes == 4, uint32_t, std::conditional_t<kBytes == 2, uint16_t, uint8_t>>>>;

template <typename V>
__device__ __forceinline__ V load_vector(const void* p) {
  using Raw = RawBits<sizeof(V)>;
  Raw r = *static_cast<const Raw*>(p);
  V v;
  memcpy(&v, &r, sizeof(V));
  return v;
}

template <typename V>
__device__ __forceinline__ void store_vector(void* p, const V& v) {
  using Raw = RawBits<sizeof(V)>;
  Raw r;
  memcpy(&r, &v, sizeof(V));
  *static_cast<Raw*>(p) = r;
}

// Elements per thread per step on the vectorized path: 16 bytes of the widest operand.
template <typename Out, typename... Ins>
constexpr int vector_width() {
  size_t widest = sizeof(Out);
  ((widest = sizeof(Ins) > widest ? sizeof(Ins) : widest), ...);
  return static_cast<int>(16 / widest);
}

template <int kVec, typename Out, typename Fn, typename... Ins, size_t... K>
__device__ __forceinline__ void vector_step(const Fn& fn, Out* out, int64_t base, int64_t n,
                                            std::index_sequence<K...>, const Ins*... in) {
  if (base + kVec <= n) {
    ::cuda::std::tuple<Aligned<Ins, kVec>...> vin{load_vector<Aligned<Ins, kVec>>(in + base)...};
    Aligned<Out, kVec> vout;
#pragma unroll
    for (int j = 0; j < kVec; ++j) vout.v[j] = fn(::cuda::std::get<K>(vin).v[j]...);
    store_vector(out + base, vout);
  } else {
    for (int64_t i = base; i < n; ++i) out[i] = fn(in[i]...);
  }
}

template <int kVec, typename Out, typename Fn, typename... Ins>
__global__ void __launch_bounds__(kBlockSize)
    vectorized_kernel(int64_t n, Fn fn, Out* out, const Ins*... in) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kVec;
  for (int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; base < n;
       base += step) {
    vector_step<kVec>(fn, out, base, n, std::index_sequence_for<Ins...>{}, in...);
  }
}

template <int N>
struct Pointers {
  char* data[N];
};

template <typename Out, typename Index, int N, typename Fn, typename... Ins, size_t... K>
__device__ __forceinline__ void strided_step(const Fn& fn, const Pointers<N>& p, const Index (&off)[N],
                                             std::index_sequence<K...>) {
  *reinterpret_cast<Out*>(p.data[0] + off[0]) =
      fn(*reinterpret_cast<const Ins*>(p.data[K + 1] + off[K + 1])...);
}

template <typename Index, typename Fn, typename Out, typename... Ins>
__global__ void __launch_bounds__(kBlockSize) strided_kernel(OffsetCalculator<1 + sizeof...(Ins), Index> calc,
                                                             Pointers<1 + sizeof...(Ins)> p, Index n, Fn fn) {
  constexpr int N = 1 + sizeof...(Ins);
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    Index off[N];
    calc.get(i, off);
    strided_step<Out, Index, N, Fn, Ins...>(fn, p, off, std::index_sequence_for<Ins...>{});
  }
}

template <int N, typename Index>
OffsetCalculator<N, Index> make_offset_calculator(const ElementwisePlan<N>& plan) {
  OffsetCalculator<N, Index> calc;
  calc.ndim = static_cast<int>(plan.sizes.size());
  for (int d = 0; d < calc.ndim; ++d) {
    calc.sizes[d] = IntDivider<Index>(static_cast<Index>(plan.sizes[d]));
    for (int k = 0; k < N; ++k) calc.strides[d][k] = static_cast<Index>(plan.strides[k][d]);
  }
  return calc;
}

// True when every operand's furthest byte offset (and the element count) fit in 31 bits and no
// stride is negative, so the strided kernel may index in uint32.
template <int N>
bool fits_32bit(const ElementwisePlan<N>& plan) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (plan.numel >= kLimit) return false;
  for (int k = 0; k < N; ++k) {
    int64_t furthest = 0;
    for (size_t d = 0; d < plan.sizes.size(); ++d) {
      if (plan.strides[k][d] < 0) return false;
      furthest += (plan.sizes[d] - 1) * plan.strides[k][d];
    }
    if (furthest >= kLimit) return false;
  }
  return true;
}

// out[i] = fn(in[i]...) over out's shape; see the top of this file.
template <typename Out, typename... Ins, typename Fn>
void launch_elementwise(const Tensor& out, const std::array<const Tensor*, sizeof...(Ins)>& inputs, Fn fn) {
  constexpr int N = 1 + sizeof...(Ins);
  NABLA_ASSERT(out.itemsize() == sizeof(Out), "launch_elementwise: output type does not match {}",
               describe(out));
  if (out.numel() == 0) return;
  std::array<const Tensor*, N> operands{&out};
  for (int k = 1; k < N; ++k) operands[k] = inputs[k - 1];
  ElementwisePlan<N> plan = make_plan<N>(operands);
  NABLA_CHECK(plan.sizes.size() <= static_cast<size_t>(kMaxDims),
              "elementwise op on CUDA: {} has {} dims that cannot be merged; at most {} are supported",
              describe(out), plan.sizes.size(), kMaxDims);
  DeviceScope device(out.device().index);
  cudaStream_t stream = stream_for(out);

  constexpr int kVec = vector_width<Out, Ins...>();
  constexpr std::array<size_t, N> kSizes{sizeof(Out), sizeof(Ins)...};
  bool vectorize = plan.sizes.size() == 1;
  for (int k = 0; k < N && vectorize; ++k) {
    vectorize = plan.strides[k][0] == static_cast<int64_t>(kSizes[k]) &&
                reinterpret_cast<uintptr_t>(plan.data[k]) % (kSizes[k] * kVec) == 0;
  }
  if (vectorize) {
    auto call = [&]<size_t... K>(std::index_sequence<K...>) {
      vectorized_kernel<kVec, Out, Fn, Ins...><<<blocks_for(plan.numel, kVec), kBlockSize, 0, stream>>>(
          plan.numel, fn, reinterpret_cast<Out*>(plan.data[0]),
          reinterpret_cast<const Ins*>(plan.data[K + 1])...);
    };
    call(std::index_sequence_for<Ins...>{});
    NABLA_CUDA_CHECK_LAUNCH();
    return;
  }
  Pointers<N> pointers;
  for (int k = 0; k < N; ++k) pointers.data[k] = plan.data[k];
  if (fits_32bit(plan)) {
    strided_kernel<uint32_t, Fn, Out, Ins...><<<blocks_for(plan.numel), kBlockSize, 0, stream>>>(
        make_offset_calculator<N, uint32_t>(plan), pointers, static_cast<uint32_t>(plan.numel), fn);
  } else {
    strided_kernel<int64_t, Fn, Out, Ins...><<<blocks_for(plan.numel), kBlockSize, 0, stream>>>(
        make_offset_calculator<N, int64_t>(plan), pointers, plan.numel, fn);
  }
  NABLA_CUDA_CHECK_LAUNCH();
}

// For kernels that only move bits (fill, same-dtype copy, where): calls fn.template operator()<U>() with U
// the unsigned type of `bytes` bytes.
template <typename Fn>
void dispatch_bits(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn.template operator()<uint8_t>();
    case 2:
      return fn.template operator()<uint16_t>();
    case 4:
      return fn.template operator()<uint32_t>();
    case 8:
      return fn.template operator()<uint64_t>();
    default:
      NABLA_ASSERT(false, "dispatch_bits: no {}-byte type", bytes);
  }
}

}  // namespace nabla::ops::cuda
