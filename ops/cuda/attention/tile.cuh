// Internal (ops/cuda/attention*.cu only). The pieces the flash-attention kernels share (Note [Flash
// attention] in attention/flash_forward.cu): the kernels' parameters, the tile loads into shared memory, the
// tensor-core instructions (ldmatrix, mma.sync m16n8k16 with float accumulators, cp.async) and
// the dispatch on the padded head size.
//
// Shared-memory tiles hold rows of kD elements (the head size D rounded up to 32, 64, 96 or 128,
// the columns past D zero-filled) at a row stride of kD + 8 elements: the extra 16 bytes shift
// consecutive rows by four banks, so the eight 16-byte rows one ldmatrix reads hit distinct banks.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16", per lane: g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major): a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t+8..), a3 = (g + 8, 2t+8..)
//   B (16 x 8, k x n):      b0 = (2t..2t+1, g), b1 = (2t+8..2t+9, g)
//   C (16 x 8, float):      c0, c1 = (g, 2t..2t+1), c2, c3 = (g + 8, 2t..2t+1)
// so a C tile of scores, rounded to 16 bits, is already the A operand of the next product.
#pragma once

#include <cstdint>
#include <type_traits>

#include "nabla/ops/cuda/common.cuh"

namespace nabla::ops::cuda::attention {

inline constexpr float kLog2e = 1.4426950408889634f;

// Element strides of a (B, H, T, D) tensor, in that order.
struct Strides {
  int64_t batch = 0, head = 0, row = 0, col = 1;
};

inline Strides strides_of(const Tensor& t) {
  // A dim of size 1 is never stepped along; its stride may be anything (a broadcast mask's).
  auto at = [&](int d) { return t.size(d) == 1 ? int64_t{0} : t.stride(d); };
  return {.batch = at(0), .head = at(1), .row = at(2), .col = at(3)};
}

// True when `mask` is a float32 (B|1, H|1, Tq, Tk) tensor.
inline bool mask_fits(const Tensor& mask, int64_t B, int64_t H, int64_t Tq, int64_t Tk) {
  return mask.dtype() == kFloat32 && mask.dim() == 4 && (mask.size(0) == 1 || mask.size(0) == B) &&
         (mask.size(1) == 1 || mask.size(1) == H) && mask.size(2) == Tq && mask.size(3) == Tk;
}

// True when every 8-element run of a row starts 16-byte aligned and is contiguous, so a tile
// row can move in 16-byte pieces: unit last stride, batch, head and row strides multiples of 8
// elements (dims of size 1 aside) and a 16-byte aligned data pointer. Reads and writes alike.
inline bool vector_ok(const Tensor& t) {
  const Strides s = strides_of(t);
  return s.col == 1 && s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0 &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Calls fn.template operator()<kD>() with kD the head size D rounded up to a multiple of 32.
template <typename Fn>
void dispatch_head_size(int64_t D, Fn&& fn) {
  NABLA_ASSERT(D > 0 && D <= 128 && D % 8 == 0, "flash attention: head size {}", D);
  if (D <= 32) {
    fn.template operator()<32>();
  } else if (D <= 64) {
    fn.template operator()<64>();
  } else if (D <= 96) {
    fn.template operator()<96>();
  } else {
    fn.template operator()<128>();
  }
}

// Raises the kernel's dynamic shared-memory limit (48 KB by default) to what it takes.
template <typename Kernel>
void allow_shared_memory(Kernel kernel, int bytes) {
  NABLA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(void* shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(shared)), "l"(global)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// 2^x in one MUFU instruction (exp2f without fast-math adds a denormal fix-up around it); results
// below 2^-126 flush to 0, which a softmax weight cannot tell from 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Four 8x8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// As ldmatrix_x4, each matrix transposed: lane l gets rows 2(l % 4) and 2(l % 4) + 1 of column l / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c += a * b for one 16x8x16 tile, 16-bit inputs, float accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>);
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, `lo` in the low half (the lower column of a fragment pair).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The A operand for keys 16kk..16kk+15 from a C-layout tile of 8-column blocks (see above).
template <typename T>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]);
  a[1] = pack2<T>(lo[2], lo[3]);
  a[2] = pack2<T>(hi[0], hi[1]);
  a[3] = pack2<T>(hi[2], hi[3]);
}

// Copies a (kRows, kD) tile into shared memory at row stride kD + 8: row r of the tile starts at
// src + r * s.row, columns step by s.col. Rows where row_ok(r) is false and columns >= D are
// zero-filled, so products over them add nothing. With `vector` (see vector_ok) the copy is
// asynchronous (cp.async; the caller commits and waits), otherwise plain loads and stores.
template <int kRows, int kD, int kThreads, typename T, typename RowOk>
__device__ __forceinline__ void load_tile(T* tile, const T* src, const Strides& s, int D, bool vector,
                                          RowOk row_ok) {
  constexpr int kChunks = kD / 8;  // 16-byte pieces per row
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    T* dst = tile + r * (kD + 8) + col;
    if (col < D && row_ok(r)) {
      const T* from = src + r * s.row + col * s.col;
      if (vector) {
        cp_async_16(dst, from);
      } else {
        for (int e = 0; e < 8; ++e) dst[e] = from[e * s.col];
      }
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

// Writes 16 rows x D columns from a shared-memory tile (row stride kD + 8) to global memory:
// row r of the tile goes to dst + r * row_stride, columns at unit stride; rows >= valid_rows are
// skipped; one warp. With `vector` (see vector_ok: dst and row_stride keep every 8-column piece
// 16-byte aligned) each piece is one 16-byte store, otherwise eight scalar stores.
template <int kD, typename T>
__device__ __forceinline__ void store_rows(T* dst, int64_t row_stride, const T* tile, int valid_rows, int D,
                                           bool vector) {
  constexpr int kChunks = kD / 8;
  const int lane = threadIdx.x % 32;
  for (int c = lane; c < 16 * kChunks; c += 32) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    if (r >= valid_rows || col >= D) continue;
    const T* from = tile + r * (kD + 8) + col;
    T* to = dst + r * row_stride + col;
    if (vector) {
      *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
    } else {
      for (int e = 0; e < 8; ++e) to[e] = from[e];
    }
  }
}

// Stores a warp's C-layout accumulators for 16 rows x kD columns, times `factor`, into its 16 rows
// of a shared-memory tile (row stride kD + 8), rounded to T.
template <int kD, typename T>
__device__ __forceinline__ void stage_rows(T* tile, const float (&acc)[kD / 8][4], float factor) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int nb = 0; nb < kD / 8; ++nb) {
    for (int r = 0; r < 2; ++r) {
      *reinterpret_cast<uint32_t*>(tile + (g + 8 * r) * (kD + 8) + nb * 8 + 2 * t) =
          pack2<T>(acc[nb][2 * r] * factor, acc[nb][2 * r + 1] * factor);
    }
  }
}

}  // namespace nabla::ops::cuda::attention
