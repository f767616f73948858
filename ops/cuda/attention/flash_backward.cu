// Fused (flash) attention on CUDA: the backward kernels (Note [Flash attention] in
// attention/flash_forward.cu).
//
// Three launches on the current stream:
//  1. prepare_kernel: delta_i = sum_d dout_id out_id (float32, (B, H, Tq)), 0 for rows that saw no
//     key (lse = -inf), and zeros in the float32 dq buffer (B, H, Tq, D), which is contiguous
//     whatever dq's strides.
//  2. backward_kernel: a block owns 128 keys of one (b, key/value head), 8 warps of 16 keys each;
//     dk and dv for its keys (16 x kD floats each per warp) stay in registers for the whole walk
//     over the query tiles of 64 that can see those keys, of every query head of its group (under causal the
//     tiles before the block's first key are skipped). Per query tile a warp recomputes its slice of the
//     weights transposed, p^T = exp(k q^T * scale + mask^T - lse) (16 keys x 64 queries), so that p^T, dp^T =
//     v dout^T and ds^T = p^T (dp^T - delta) are all C-layout tiles with keys as rows: they feed dv += p^T
//     dout and dk += ds^T q as A operands straight from registers. dq needs ds with queries as rows, so ds^T
//     goes through shared memory, and dq += ds k is added to the float32 buffer with atomics (every key block
//     adds into the same dq rows). Shared memory: k and v (128 x kD), q and dout double-buffered (2 x 64 x kD
//     each, the next tile's copy overlaps this tile's products), ds^T (128 x 64): 155 KB at kD = 128.
//  3. finish_dq_kernel: dq = buffer * scale, rounded to q's dtype and written at dq's strides.
// dq, dk and dv may be strided views (say of one (B, T, 3, H, D) buffer, as q, k and v are views
// of one projection in a GPT); dk and dv rows are stored 16 bytes at a time where vector_ok.
// Rows that saw no key get dout = 0 and delta = 0 here, so a NaN in their dout (their output is
// NaN) reaches neither dk nor dv, and their dq row is 0.
#include <cmath>

#include "nabla/core/cuda/device_guard.h"
#include "nabla/ops/cuda/attention/kernels.h"
#include "nabla/ops/cuda/attention/tile.cuh"

namespace nabla::ops::cuda {

namespace {

using namespace attention;

constexpr int kKeyRows = 128;   // keys per block
constexpr int kQueryRows = 64;  // queries per tile
constexpr int kWarps = kKeyRows / 16;
constexpr int kThreads = kWarps * 32;
constexpr int kDsStride = kQueryRows + 8;  // row stride of the ds^T tile (see attention/tile.cuh)

template <typename T>
struct BackwardParams {
  const T* q;          // (B, H, Tq, D)
  const T* k;          // (B, H / group, Tk, D)
  const T* v;          // (B, H / group, Tk, D)
  const T* dout;       // (B, H, Tq, D)
  const float* mask;   // (B|1, H|1, Tq, Tk) or null
  const float* lse;    // (B, H, Tq)
  const float* delta;  // (B, H, Tq)
  float* dq_sum;       // (B, H, Tq, D), float32, unscaled
  T* dk;               // (B, H / group, Tk, D)
  T* dv;               // (B, H / group, Tk, D)
  Strides q_strides, k_strides, v_strides, dout_strides, mask_strides, dk_strides, dv_strides;
  int H, Tq, Tk, D;
  int group;  // query heads per key/value head (grouped-query attention; 1 without)
  float scale;
  bool causal;
  bool vector_in;   // q, k, v and dout move in 16-byte pieces
  bool vector_out;  // dk and dv move in 16-byte pieces (vector_ok)
};

template <int kD>
constexpr int backward_shared_bytes() {
  return (2 * kKeyRows + 4 * kQueryRows) * (kD + 8) * 2 + kKeyRows * kDsStride * 2 + 4 * kQueryRows * 4;
}

// 8 lanes per row, 32 rows per 256-thread block; rows are (b, h, i) flattened and a lane takes
// every 8th 8-column piece of its row.
template <typename T>
__global__ void prepare_kernel(const T* __restrict__ dout, Strides dout_strides, const T* __restrict__ out,
                               Strides out_strides, const float* __restrict__ lse, float* __restrict__ delta,
                               float* __restrict__ dq_sum, int64_t rows, int H, int Tq, int D) {
  const int64_t row = int64_t{blockIdx.x} * (blockDim.x / 8) + threadIdx.x / 8;
  const int lane = threadIdx.x % 8;
  const bool live = row < rows;  // no early return: the whole warp takes part in the shuffles
  float sum = 0.f;
  if (live) {
    const int i = static_cast<int>(row % Tq);
    const int64_t bh = row / Tq;
    const int64_t b = bh / H, h = bh % H;
    const T* dout_row = dout + b * dout_strides.batch + h * dout_strides.head + i * dout_strides.row;
    const T* out_row = out + b * out_strides.batch + h * out_strides.head + i * out_strides.row;
    for (int col = lane * 8; col < D; col += 64) {
      for (int e = 0; e < 8; ++e) {
        sum += load_as_opmath(dout_row[(col + e) * dout_strides.col]) *
               load_as_opmath(out_row[(col + e) * out_strides.col]);
      }
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1, 8);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2, 8);
  sum += __shfl_xor_sync(0xffffffffu, sum, 4, 8);
  if (!live) return;
  if (lane == 0) delta[row] = lse[row] == -INFINITY ? 0.f : sum;
  float4* dq_row = reinterpret_cast<float4*>(dq_sum + row * D);
  for (int c = lane; c < D / 4; c += 8) dq_row[c] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// Grid (row blocks, H, B), blockDim (D / 8, rows per block): a thread rounds one 8-column piece
// of a row, read from the contiguous float32 buffer as two float4, and writes it at dq's strides,
// in one 16-byte store when `vector` (vector_ok(dq)).
template <typename T>
__global__ void finish_dq_kernel(const float* __restrict__ dq_sum, T* __restrict__ dq, Strides dq_strides,
                                 int H, int Tq, int D, float scale, bool vector) {
  const int i = blockIdx.x * blockDim.y + threadIdx.y;
  if (i >= Tq) return;
  const int b = blockIdx.z, h = blockIdx.y, col = threadIdx.x * 8;
  const float4* from = reinterpret_cast<const float4*>(dq_sum + ((int64_t{b} * H + h) * Tq + i) * D + col);
  const float4 lo = from[0], hi = from[1];
  const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  T* to = dq + b * dq_strides.batch + h * dq_strides.head + i * dq_strides.row + col;
  if (vector) {
    uint4 packed;
    packed.x = pack2<T>(x[0] * scale, x[1] * scale);
    packed.y = pack2<T>(x[2] * scale, x[3] * scale);
    packed.z = pack2<T>(x[4] * scale, x[5] * scale);
    packed.w = pack2<T>(x[6] * scale, x[7] * scale);
    *reinterpret_cast<uint4*>(to) = packed;
  } else {
    for (int e = 0; e < 8; ++e) to[e] = store_from<T>(x[e] * scale);
  }
}

// Copies query tile `q0` (q, dout, lse, delta) into buffer `buf`; lse becomes +inf and dout 0
// for rows past Tq and rows that saw no key, so their weights are exp(-inf) = 0 and they add
// nothing (NaN dout included).
template <typename T, int kD>
__device__ __forceinline__ void load_query_tile(const BackwardParams<T>& p, int q0, const T* q, const T* dout,
                                                const float* lse, const float* delta, T* q_tile, T* dout_tile,
                                                float* lse_tile, float* delta_tile) {
  const int rows = p.Tq - q0;
  load_tile<kQueryRows, kD, kThreads>(q_tile, q + q0 * p.q_strides.row, p.q_strides, p.D, p.vector_in,
                                      [&](int r) { return r < rows; });
  load_tile<kQueryRows, kD, kThreads>(dout_tile, dout + q0 * p.dout_strides.row, p.dout_strides, p.D,
                                      p.vector_in,
                                      [&](int r) { return r < rows && lse[q0 + r] != -INFINITY; });
  if (threadIdx.x < kQueryRows) {
    const int r = threadIdx.x;
    const bool live = r < rows && lse[q0 + r] != -INFINITY;
    lse_tile[r] = live ? lse[q0 + r] : INFINITY;
    delta_tile[r] = live ? delta[q0 + r] : 0.f;
  }
}

// What a block reads of query head h: its q, dout, lse, delta and mask rows.
template <typename T>
struct QueryHead {
  const T* q;
  const T* dout;
  const float* lse;
  const float* delta;
  const float* mask;
  int64_t bh;  // b * H + h, the head's row block in lse, delta and the dq buffer
};

template <typename T>
__device__ __forceinline__ QueryHead<T> query_head(const BackwardParams<T>& p, int b, int h) {
  const int64_t bh = int64_t{b} * p.H + h;
  return {.q = p.q + b * p.q_strides.batch + h * p.q_strides.head,
          .dout = p.dout + b * p.dout_strides.batch + h * p.dout_strides.head,
          .lse = p.lse + bh * p.Tq,
          .delta = p.delta + bh * p.Tq,
          .mask = p.mask ? p.mask + b * p.mask_strides.batch + h * p.mask_strides.head : nullptr,
          .bh = bh};
}

// Grid (key tiles, H / group, B), kThreads threads; see the file's opening note. With grouped
// heads the walk covers the query tiles of each of the group's query heads in turn.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) backward_kernel(const __grid_constant__ BackwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kStride = kD + 8;
  extern __shared__ __align__(16) unsigned char shared[];
  T* k_tile = reinterpret_cast<T*>(shared);                                     // (kKeyRows, kStride)
  T* v_tile = k_tile + kKeyRows * kStride;                                      // (kKeyRows, kStride)
  T* q_tiles = v_tile + kKeyRows * kStride;                                     // 2 x (kQueryRows, kStride)
  T* dout_tiles = q_tiles + 2 * kQueryRows * kStride;                           // 2 x (kQueryRows, kStride)
  T* ds_tile = dout_tiles + 2 * kQueryRows * kStride;                           // (kKeyRows, kDsStride): ds^T
  float* lse_tiles = reinterpret_cast<float*>(ds_tile + kKeyRows * kDsStride);  // 2 x kQueryRows
  float* delta_tiles = lse_tiles + 2 * kQueryRows;                              // 2 x kQueryRows

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int b = blockIdx.z, hk = blockIdx.y;  // hk: the key/value head
  const int k0 = blockIdx.x * kKeyRows;

  const int key_rows = p.Tk - k0;
  load_tile<kKeyRows, kD, kThreads>(
      k_tile, p.k + b * p.k_strides.batch + hk * p.k_strides.head + k0 * p.k_strides.row, p.k_strides, p.D,
      p.vector_in, [&](int r) { return r < key_rows; });
  load_tile<kKeyRows, kD, kThreads>(
      v_tile, p.v + b * p.v_strides.batch + hk * p.v_strides.head + k0 * p.v_strides.row, p.v_strides, p.D,
      p.vector_in, [&](int r) { return r < key_rows; });
  // Under causal, queries before k0 see none of these keys. The walk is over steps: step j is
  // query tile first + j % tiles of query head hk * group + j / tiles.
  const int first = p.causal ? k0 / kQueryRows : 0;
  const int query_tiles = (p.Tq + kQueryRows - 1) / kQueryRows;
  const int tiles = max(query_tiles - first, 0);
  const int steps = tiles * p.group;
  const auto step_head = [&](int j) { return query_head(p, b, hk * p.group + j / tiles); };
  if (steps > 0) {
    const QueryHead<T> head = step_head(0);
    load_query_tile<T, kD>(p, first * kQueryRows, head.q, head.dout, head.lse, head.delta, q_tiles,
                           dout_tiles, lse_tiles, delta_tiles);
  }
  cp_async_commit();

  float dk[kD / 8][4] = {};  // (16 keys, kD) per warp, C layout, unscaled
  float dv[kD / 8][4] = {};
  const int warp_key0 = k0 + warp * 16;
  const int my_keys[2] = {warp_key0 + g, warp_key0 + g + 8};
  const T* k_rows = k_tile + warp * 16 * kStride;  // the warp's 16 keys
  const T* v_rows = v_tile + warp * 16 * kStride;

  for (int j = 0; j < steps; ++j) {
    const int buf = j % 2;
    const int q0 = (first + j % tiles) * kQueryRows;
    const QueryHead<T> head = step_head(j);
    const float* mask = head.mask;
    if (j + 1 < steps) {
      const QueryHead<T> next = step_head(j + 1);
      load_query_tile<T, kD>(p, (first + (j + 1) % tiles) * kQueryRows, next.q, next.dout, next.lse,
                             next.delta, q_tiles + (1 - buf) * kQueryRows * kStride,
                             dout_tiles + (1 - buf) * kQueryRows * kStride,
                             lse_tiles + (1 - buf) * kQueryRows, delta_tiles + (1 - buf) * kQueryRows);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // step j's tile has landed (for the lse/delta stores too)
    const T* q_tile = q_tiles + buf * kQueryRows * kStride;
    const T* dout_tile = dout_tiles + buf * kQueryRows * kStride;
    const float* lse_tile = lse_tiles + buf * kQueryRows;
    const float* delta_tile = delta_tiles + buf * kQueryRows;

    // Under causal a warp whose keys all follow the tile's last query is seen by none of it.
    const bool active = !p.causal || warp_key0 <= q0 + kQueryRows - 1;
    if (active) {
      // s^T = k q^T for the warp's 16 keys x 64 queries.
      float pt[kQueryRows / 8][4] = {};
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, k_rows + (lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
        for (int np = 0; np < kQueryRows / 16; ++np) {
          uint32_t bq[4];
          ldmatrix_x4(
              bq, q_tile + (np * 16 + lane % 8 + (lane / 16) * 8) * kStride + kk * 16 + (lane / 8 % 2) * 8);
          mma_16816<T>(pt[2 * np], a, bq[0], bq[1]);
          mma_16816<T>(pt[2 * np + 1], a, bq[2], bq[3]);
        }
      }
      // p^T = exp(s^T * scale + mask^T - lse), 0 where hidden.
      const bool edge = mask || k0 + kKeyRows > p.Tk || (p.causal && warp_key0 + 15 > q0);
      for (int nb = 0; nb < kQueryRows / 8; ++nb) {
        for (int e = 0; e < 4; ++e) {
          const int col = nb * 8 + 2 * t + e % 2;
          float x = pt[nb][e] * p.scale;
          if (edge) {
            const int key = my_keys[e / 2], i = q0 + col;
            if (key >= p.Tk || (p.causal && key > i)) {
              x = -INFINITY;
            } else if (mask && i < p.Tq) {
              x += mask[i * p.mask_strides.row + key * p.mask_strides.col];
            }
          }
          pt[nb][e] = fast_exp2((x - lse_tile[col]) * kLog2e);
        }
      }
      // dv += p^T dout.
      for (int kk = 0; kk < kQueryRows / 16; ++kk) {
        uint32_t a[4];
        c_to_a<T>(a, pt[2 * kk], pt[2 * kk + 1]);
        for (int dp = 0; dp < kD / 16; ++dp) {
          uint32_t bo[4];
          ldmatrix_x4_trans(bo, dout_tile + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * kStride + dp * 16 +
                                    (lane / 16) * 8);
          mma_16816<T>(dv[2 * dp], a, bo[0], bo[1]);
          mma_16816<T>(dv[2 * dp + 1], a, bo[2], bo[3]);
        }
      }
      // dp^T = v dout^T, then ds^T = p^T (dp^T - delta) in place of p^T.
      float dpt[kQueryRows / 8][4] = {};
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, v_rows + (lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
        for (int np = 0; np < kQueryRows / 16; ++np) {
          uint32_t bo[4];
          ldmatrix_x4(bo, dout_tile + (np * 16 + lane % 8 + (lane / 16) * 8) * kStride + kk * 16 +
                              (lane / 8 % 2) * 8);
          mma_16816<T>(dpt[2 * np], a, bo[0], bo[1]);
          mma_16816<T>(dpt[2 * np + 1], a, bo[2], bo[3]);
        }
      }
      for (int nb = 0; nb < kQueryRows / 8; ++nb) {
        for (int e = 0; e < 4; ++e) pt[nb][e] *= dpt[nb][e] - delta_tile[nb * 8 + 2 * t + e % 2];
      }
      // dk += ds^T q.
      for (int kk = 0; kk < kQueryRows / 16; ++kk) {
        uint32_t a[4];
        c_to_a<T>(a, pt[2 * kk], pt[2 * kk + 1]);
        for (int dp = 0; dp < kD / 16; ++dp) {
          uint32_t bq[4];
          ldmatrix_x4_trans(
              bq, q_tile + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * kStride + dp * 16 + (lane / 16) * 8);
          mma_16816<T>(dk[2 * dp], a, bq[0], bq[1]);
          mma_16816<T>(dk[2 * dp + 1], a, bq[2], bq[3]);
        }
      }
      // ds^T to shared memory (keys as rows) for the dq product.
      for (int nb = 0; nb < kQueryRows / 8; ++nb) {
        for (int r = 0; r < 2; ++r) {
          *reinterpret_cast<uint32_t*>(ds_tile + (warp * 16 + g + 8 * r) * kDsStride + nb * 8 + 2 * t) =
              pack2<T>(pt[nb][2 * r], pt[nb][2 * r + 1]);
        }
      }
    } else {
      for (int nb = 0; nb < kQueryRows / 8; ++nb) {
        for (int r = 0; r < 2; ++r) {
          *reinterpret_cast<uint32_t*>(ds_tile + (warp * 16 + g + 8 * r) * kDsStride + nb * 8 + 2 * t) = 0u;
        }
      }
    }
    __syncthreads();  // ds^T is complete; every warp is done with q and dout of this tile

    // dq += ds k: warp w takes queries 16 (w % 4).. and columns (w / 4) kD / 2.., summing over the
    // block's 128 keys.
    {
      const int qb = warp % 4, c0 = (warp / 4) * (kD / 2);
      float dq[kD / 16][4] = {};
      for (int kk = 0; kk < kKeyRows / 16; ++kk) {
        uint32_t a[4];  // ds (queries x keys) read transposed from ds^T
        ldmatrix_x4_trans(
            a, ds_tile + (kk * 16 + lane % 8 + (lane / 16) * 8) * kDsStride + qb * 16 + (lane / 8 % 2) * 8);
        for (int dp = 0; dp < kD / 32; ++dp) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, k_tile + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * kStride + c0 + dp * 16 +
                                    (lane / 16) * 8);
          mma_16816<T>(dq[2 * dp], a, bk[0], bk[1]);
          mma_16816<T>(dq[2 * dp + 1], a, bk[2], bk[3]);
        }
      }
      for (int r = 0; r < 2; ++r) {
        const int i = q0 + qb * 16 + g + 8 * r;
        if (i >= p.Tq) continue;
        float* row = p.dq_sum + (head.bh * p.Tq + i) * p.D;
        for (int nb = 0; nb < kD / 16; ++nb) {
          const int col = c0 + nb * 8 + 2 * t;
          if (col >= p.D) continue;
#if __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2*>(row + col), make_float2(dq[nb][2 * r], dq[nb][2 * r + 1]));
#else
          atomicAdd(row + col, dq[nb][2 * r]);
          atomicAdd(row + col + 1, dq[nb][2 * r + 1]);
#endif
        }
      }
    }
    // The next iteration's first barrier orders these reads of ds^T before its writes; the next
    // copies go to the other buffer, which every warp left before the barrier above.
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with k and v (and, with no query tile, their copies landed)

  // Each warp stages its dk, dv rows in its own rows of the k and v tiles.
  T* dk_rows = k_tile + warp * 16 * kStride;
  T* dv_rows = v_tile + warp * 16 * kStride;
  stage_rows<kD>(dk_rows, dk, p.scale);
  stage_rows<kD>(dv_rows, dv, 1.f);
  __syncwarp();
  store_rows<kD>(p.dk + b * p.dk_strides.batch + hk * p.dk_strides.head + warp_key0 * p.dk_strides.row,
                 p.dk_strides.row, dk_rows, p.Tk - warp_key0, p.D, p.vector_out);
  store_rows<kD>(p.dv + b * p.dv_strides.batch + hk * p.dv_strides.head + warp_key0 * p.dv_strides.row,
                 p.dv_strides.row, dv_rows, p.Tk - warp_key0, p.D, p.vector_out);
#endif
}

}  // namespace

void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& mask, bool causal,
                              double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  NABLA_ASSERT(flash_attention_supported(q, k, v), "flash_attention_backward: unsupported inputs");
  NABLA_ASSERT(dout.sizes() == q.sizes() && dout.dtype() == q.dtype() && out.sizes() == q.sizes() &&
                   out.dtype() == q.dtype() && lse.is_contiguous() && lse.dtype() == kFloat32,
               "flash_attention_backward: dout, out or lse do not match q");
  NABLA_ASSERT(dq.sizes() == q.sizes() && dk.sizes() == k.sizes() && dv.sizes() == v.sizes() &&
                   dq.dtype() == q.dtype() && dk.dtype() == q.dtype() && dv.dtype() == q.dtype() &&
                   dq.stride(3) == 1 && dk.stride(3) == 1 && dv.stride(3) == 1,
               "flash_attention_backward: dq, dk and dv must have the shapes of q, k and v, q's dtype "
               "and a unit last stride");
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3);
  NABLA_ASSERT(!mask.defined() || mask_fits(mask, B, H, Tq, Tk),
               "flash_attention_backward: the mask must be float32 (B|1, H|1, Tq, Tk)");
  if (B == 0 || H == 0 || (Tq == 0 && Tk == 0)) return;
  nabla::cuda::DeviceGuard device(q.device().index);
  const cudaStream_t stream = stream_for(q);
  const int64_t rows = B * H * Tq;
  Tensor delta = Tensor::empty({B, H, Tq}, lse.options());      // (B, H, Tq)
  Tensor dq_sum = Tensor::empty({B, H, Tq, D}, lse.options());  // (B, H, Tq, D)
  dispatch_device<TypeSet::Floating>(q.dtype(), "flash_attention_backward", [&]<typename T>() {
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      if (rows > 0) {
        constexpr int kRowsPerBlock = kBlockSize / 8;
        prepare_kernel<T>
            <<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kBlockSize, 0, stream>>>(
                static_cast<const T*>(dout.data_ptr()), strides_of(dout),
                static_cast<const T*>(out.data_ptr()), strides_of(out),
                static_cast<const float*>(lse.data_ptr()), static_cast<float*>(delta.data_ptr()),
                static_cast<float*>(dq_sum.data_ptr()), rows, static_cast<int>(H), static_cast<int>(Tq),
                static_cast<int>(D));
        NABLA_CUDA_CHECK_LAUNCH();
      }
      if (Tk > 0) {
        const BackwardParams<T> params{
            .q = static_cast<const T*>(q.data_ptr()),
            .k = static_cast<const T*>(k.data_ptr()),
            .v = static_cast<const T*>(v.data_ptr()),
            .dout = static_cast<const T*>(dout.data_ptr()),
            .mask = mask.defined() ? static_cast<const float*>(mask.data_ptr()) : nullptr,
            .lse = static_cast<const float*>(lse.data_ptr()),
            .delta = static_cast<const float*>(delta.data_ptr()),
            .dq_sum = static_cast<float*>(dq_sum.data_ptr()),
            .dk = static_cast<T*>(dk.data_ptr()),
            .dv = static_cast<T*>(dv.data_ptr()),
            .q_strides = strides_of(q),
            .k_strides = strides_of(k),
            .v_strides = strides_of(v),
            .dout_strides = strides_of(dout),
            .mask_strides = mask.defined() ? strides_of(mask) : Strides{},
            .dk_strides = strides_of(dk),
            .dv_strides = strides_of(dv),
            .H = static_cast<int>(H),
            .Tq = static_cast<int>(Tq),
            .Tk = static_cast<int>(Tk),
            .D = static_cast<int>(D),
            .group = static_cast<int>(H / k.size(1)),
            .scale = static_cast<float>(scale),
            .causal = causal,
            .vector_in = vector_ok(q) && vector_ok(k) && vector_ok(v) && vector_ok(dout),
            .vector_out = vector_ok(dk) && vector_ok(dv)};
        const dim3 grid(static_cast<unsigned>((Tk + kKeyRows - 1) / kKeyRows),
                        static_cast<unsigned>(k.size(1)), static_cast<unsigned>(B));
        dispatch_head_size(D, [&]<int kD>() {
          constexpr int bytes = backward_shared_bytes<kD>();
          allow_shared_memory(backward_kernel<T, kD>, bytes);
          backward_kernel<T, kD><<<grid, kThreads, bytes, stream>>>(params);
          NABLA_CUDA_CHECK_LAUNCH();
        });
      }
      if (rows > 0) {
        const int chunks = static_cast<int>(D / 8);  // D is a multiple of 8, at most 128
        const int rows_per_block = kBlockSize / chunks;
        const dim3 grid(static_cast<unsigned>((Tq + rows_per_block - 1) / rows_per_block),
                        static_cast<unsigned>(H), static_cast<unsigned>(B));
        finish_dq_kernel<T><<<grid, dim3(chunks, rows_per_block), 0, stream>>>(
            static_cast<const float*>(dq_sum.data_ptr()), static_cast<T*>(dq.data_ptr()), strides_of(dq),
            static_cast<int>(H), static_cast<int>(Tq), static_cast<int>(D), static_cast<float>(scale),
            vector_ok(dq));
        NABLA_CUDA_CHECK_LAUNCH();
      }
    } else {
      NABLA_ASSERT(false, "flash_attention_backward: dtype is not float16 or bfloat16");
    }
  });
}

}  // namespace nabla::ops::cuda
