// Fused (flash) attention on CUDA: the forward kernel and flash_attention_supported. The backward
// kernels are in attention/flash_backward.cu, the pieces both share in attention/tile.cuh.
//
// Note [Flash attention]
// ~~~~~~~~~~~~~~~~~~~~~~
// softmax(q k^T * scale + mask) v is computed without writing the (Tq, Tk) scores to memory
// (FlashAttention-2, Dao 2023). Forward: a block owns 128 queries of one (b, h), holds their
// q rows in shared memory and walks the keys in tiles of 64. For each key tile it computes the
// scores s = q k^T * scale (+ mask) on tensor cores, then updates each query row's running max m
// and running sum l of exp(s - m) ("online softmax"): when m grows, l and the output accumulator
// o are rescaled by exp(m_old - m_new) before the tile's exp(s - m_new) v is added. After the
// last tile, out = o / l and lse = m + log(l), the log of the softmax denominator, which is all
// the backward needs to recompute the softmax weights p = exp(s - lse) tile by tile.
// Backward (attention/flash_backward.cu): delta_i = sum_d dout_id out_id first; then a block owns 128
// keys and walks the query tiles of 64 that can see them, recomputing p and accumulating
//   dv += p^T dout,   dp = dout v^T,   ds = p (dp - delta),   dk += ds^T q * scale
// in registers, and adding dq += ds k * scale into a float32 buffer with atomics (a second
// kernel rounds it to q's dtype).
//
// Memory: O(B H T D). Forward keeps only out and lse (B, H, Tq) float32; backward adds delta
// (B, H, Tq) and the dq buffer (B, H, Tq, D) float32, both from the caching allocator.
//
// Forward layout: 8 warps, each owning 16 query rows; the accumulator o (16 x kD floats per warp)
// and the scores of the current key tile (16 x 64) live in registers, m and l too (two rows per
// lane). Shared memory holds the q tile (128 x kD), one k tile and one v tile (64 x kD): 68 KB at
// kD = 128, so two blocks fit on an SM. The copy of v_j overlaps the scores of tile j, the copy
// of k_{j+1} the product p v_j.
// Scores are computed in float in the natural-log domain (s - m is formed before scaling by
// log2(e) for exp2), so a finite mask of any size, even float's lowest, never overflows.
// One limit of keeping only lse: where a huge finite mask (say float's lowest) sets a row's best
// score, lse = m + log(l) rounds to m, so the output is right (uniform weights, as the math path
// gives) but the backward recomputes that row's weights as 1 instead of 1 / l; finite, no NaN.
// -inf is the way to hide keys.
//
// Masking: keys past Tk and, with causal, keys after the query (j > i) score -inf. Under causal a
// block skips key tiles after its last query and a warp skips tiles after its last row; blocks
// start with the last (longest) query tiles so the short ones fill the tail of the grid.
// A query row that sees no key (every score -inf) gets out = NaN and lse = -inf, as the math
// path's softmax of all -inf gives NaN (with Tk = 0 the math path gives 0, and so does this).
// The backward treats such rows as absent: their dout and delta count as 0, so they add nothing
// to dk and dv, and their dq row is 0.
//
// Head sizes: D a multiple of 8 up to 128 runs in the kernel for kD = D rounded up to 32, 64, 96
// or 128, the columns past D zero-filled in shared memory (zero columns add nothing to q k^T, and
// the output columns past D are not stored).
//
// Grouped-query attention (k and v with H / group heads): query head h reads key/value head
// h / group where it would read head h, with no copy. The backward's blocks own keys of one
// key/value head and walk the query tiles of each query head of its group in turn, so dk and dv
// are summed over the group in registers.
#include <cmath>

#include "nabla/core/cuda/device_guard.h"
#include "nabla/ops/cuda/attention/kernels.h"
#include "nabla/ops/cuda/attention/tile.cuh"

namespace nabla::ops::cuda {

namespace {

using namespace attention;

constexpr int kQueryRows = 128;  // queries per block
constexpr int kKeyRows = 64;     // keys per tile
constexpr int kWarps = kQueryRows / 16;
constexpr int kThreads = kWarps * 32;
// Two blocks per SM (at most 128 registers a thread) hide the latency of one block's barriers and
// copies behind the other's products. At B 16, H 12, T 1024, D 64 and B 8, H 16, T 2048, D 128,
// causal or not, it runs 1.3x to 1.6x faster than one block without the limit,
// also at kD = 128, where it spills a few registers.
constexpr int kMinBlocksPerSm = 2;

template <typename T>
struct ForwardParams {
  const T* q;         // (B, H, Tq, D)
  const T* k;         // (B, H / group, Tk, D)
  const T* v;         // (B, H / group, Tk, D)
  const float* mask;  // (B|1, H|1, Tq, Tk) or null
  T* out;             // (B, H, Tq, D)
  float* lse;         // (B, H, Tq), contiguous
  Strides q_strides, k_strides, v_strides, mask_strides, out_strides;
  int H, Tq, Tk, D;
  int group;  // query heads per key/value head (grouped-query attention; 1 without)
  float scale;
  bool causal;
  bool vector_in;   // q, k and v move in 16-byte pieces (vector_ok)
  bool vector_out;  // out moves in 16-byte pieces (vector_ok)
};

template <int kD>
constexpr int forward_shared_bytes() {
  return (kQueryRows + 2 * kKeyRows) * (kD + 8) * 2;
}

// Grid (query tiles, H, B), kThreads threads; see Note [Flash attention].
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    forward_kernel(const __grid_constant__ ForwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kStride = kD + 8;
  extern __shared__ __align__(16) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);   // (kQueryRows, kStride)
  T* k_tile = q_tile + kQueryRows * kStride;  // (kKeyRows, kStride)
  T* v_tile = k_tile + kKeyRows * kStride;    // (kKeyRows, kStride)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int b = blockIdx.z, h = blockIdx.y;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kQueryRows;  // the longest (causal) tiles first
  const int rows = min(kQueryRows, p.Tq - q0);
  const int warp_row0 = q0 + warp * 16;  // the warp's first query

  const T* q = p.q + b * p.q_strides.batch + h * p.q_strides.head + q0 * p.q_strides.row;
  const int hk = h / p.group;  // the key/value head query head h reads
  const T* k = p.k + b * p.k_strides.batch + hk * p.k_strides.head;
  const T* v = p.v + b * p.v_strides.batch + hk * p.v_strides.head;
  const float* mask = p.mask ? p.mask + b * p.mask_strides.batch + h * p.mask_strides.head : nullptr;

  int key_tiles = (p.Tk + kKeyRows - 1) / kKeyRows;
  if (p.causal) key_tiles = min(key_tiles, (q0 + rows - 1) / kKeyRows + 1);

  load_tile<kQueryRows, kD, kThreads>(q_tile, q, p.q_strides, p.D, p.vector_in,
                                      [&](int r) { return r < rows; });
  if (key_tiles > 0) {
    load_tile<kKeyRows, kD, kThreads>(k_tile, k, p.k_strides, p.D, p.vector_in,
                                      [&](int r) { return r < p.Tk; });
  }
  cp_async_commit();

  float o[kD / 8][4] = {};                    // (16, kD) per warp, C layout
  float row_max[2] = {-INFINITY, -INFINITY};  // rows g and g + 8
  float row_sum[2] = {0.f, 0.f};              // this lane's part; the quad's sum is the row's
  const int my_rows[2] = {warp_row0 + g, warp_row0 + g + 8};

  for (int j = 0; j < key_tiles; ++j) {
    const int k0 = j * kKeyRows;
    cp_async_wait<0>();
    __syncthreads();  // k_j (and q) have landed; every warp is done with v_{j-1}
    load_tile<kKeyRows, kD, kThreads>(v_tile, v + k0 * p.v_strides.row, p.v_strides, p.D, p.vector_in,
                                      [&](int r) { return k0 + r < p.Tk; });
    cp_async_commit();

    // Under causal a warp whose rows all precede the tile sees none of it.
    const bool active = !p.causal || k0 <= warp_row0 + 15;
    float s[kKeyRows / 8][4];  // (16, kKeyRows) scores, then weights, C layout
    if (active) {
#pragma unroll
      for (int nb = 0; nb < kKeyRows / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, q_tile + (warp * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
        for (int np = 0; np < kKeyRows / 16; ++np) {
          uint32_t bk[4];
          ldmatrix_x4(
              bk, k_tile + (np * 16 + lane % 8 + (lane / 16) * 8) * kStride + kk * 16 + (lane / 8 % 2) * 8);
          mma_16816<T>(s[2 * np], a, bk[0], bk[1]);
          mma_16816<T>(s[2 * np + 1], a, bk[2], bk[3]);
        }
      }
      const bool edge = mask || k0 + kKeyRows > p.Tk || (p.causal && k0 + kKeyRows - 1 > warp_row0);
#pragma unroll
      for (int nb = 0; nb < kKeyRows / 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nb][e] * p.scale;
          if (edge) {
            const int i = my_rows[e / 2], key = k0 + nb * 8 + 2 * t + e % 2;
            if (key >= p.Tk || (p.causal && key > i)) {
              x = -INFINITY;
            } else if (mask && i < p.Tq) {
              x += mask[i * p.mask_strides.row + key * p.mask_strides.col];
            }
          }
          s[nb][e] = x;
        }
      }
      // Online softmax: fold this tile into each row's running max and sum.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < kKeyRows / 8; ++nb)
          tile_max = fmaxf(tile_max, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float new_max = fmaxf(row_max[r], tile_max);
        // A row that has seen only -inf keeps max -inf; subtracting 0 instead keeps exp(-inf) = 0
        // rather than exp(-inf - -inf) = NaN.
        const float base = new_max == -INFINITY ? 0.f : new_max;
        const float rescale = fast_exp2((row_max[r] - base) * kLog2e);
        row_max[r] = new_max;
        row_sum[r] *= rescale;
#pragma unroll
        for (int nd = 0; nd < kD / 8; ++nd) {
          o[nd][2 * r] *= rescale;
          o[nd][2 * r + 1] *= rescale;
        }
#pragma unroll
        for (int nb = 0; nb < kKeyRows / 8; ++nb) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[nb][e] = fast_exp2((s[nb][e] - base) * kLog2e);
            row_sum[r] += s[nb][e];
          }
        }
      }
    }

    cp_async_wait<0>();
    __syncthreads();  // v_j has landed; every warp is done with k_j
    if (j + 1 < key_tiles) {
      const int k1 = k0 + kKeyRows;
      load_tile<kKeyRows, kD, kThreads>(k_tile, k + k1 * p.k_strides.row, p.k_strides, p.D, p.vector_in,
                                        [&](int r) { return k1 + r < p.Tk; });
      cp_async_commit();
    }
    if (active) {  // o += p v_j, the weights rounded to T as the A operand
#pragma unroll
      for (int kk = 0; kk < kKeyRows / 16; ++kk) {
        uint32_t a[4];
        c_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < kD / 16; ++dp) {
          uint32_t bv[4];
          ldmatrix_x4_trans(
              bv, v_tile + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * kStride + dp * 16 + (lane / 16) * 8);
          mma_16816<T>(o[2 * dp], a, bv[0], bv[1]);
          mma_16816<T>(o[2 * dp + 1], a, bv[2], bv[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // with no key tile the q copy may still be in flight

  // (b, h) read again from blockIdx rather than kept live across the key loop, which would spill
  // at kD = 96.
  const int64_t b_out = blockIdx.z, h_out = blockIdx.y;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : (p.Tk == 0 ? 0.f : NAN);
#pragma unroll
    for (int nd = 0; nd < kD / 8; ++nd) {
      o[nd][2 * r] *= inv;
      o[nd][2 * r + 1] *= inv;
    }
    if (t == 0 && my_rows[r] < p.Tq)
      p.lse[(b_out * p.H + h_out) * p.Tq + my_rows[r]] = l > 0.f ? row_max[r] + logf(l) : -INFINITY;
  }
  // The warp's q rows are read by this warp alone, so they can take its output rows.
  T* staged = q_tile + warp * 16 * kStride;
  __syncwarp();
  stage_rows<kD>(staged, o, 1.f);
  __syncwarp();
  store_rows<kD>(
      p.out + b_out * p.out_strides.batch + h_out * p.out_strides.head + warp_row0 * p.out_strides.row,
      p.out_strides.row, staged, p.Tq - warp_row0, p.D, p.vector_out);
#endif
}

}  // namespace

bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  const DType dtype = q.dtype();
  if (dtype != kFloat16 && dtype != kBFloat16) return false;
  if (k.dtype() != dtype || v.dtype() != dtype) return false;
  if (!q.is_cuda() || k.device() != q.device() || v.device() != q.device()) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  const int64_t D = q.size(3);
  if (D % 8 != 0 || D <= 0 || D > 128 || k.size(3) != D || v.size(3) != D) return false;
  // Grouped-query attention: k and v share a head count that divides q's.
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(1) != v.size(1)) return false;
  if (k.size(1) == 0 ? q.size(1) != 0 : q.size(1) % k.size(1) != 0) return false;  // H = 0: nothing to do
  if (k.size(2) != v.size(2)) return false;
  // Grid limits: (b, h) are the grid's z and y; the kernels index rows with int.
  if (q.size(0) > 65535 || q.size(1) > 65535) return false;
  if (q.size(2) > (int64_t{1} << 30) || k.size(2) > (int64_t{1} << 30)) return false;
  // ldmatrix, cp.async and bfloat16 mma.sync need sm_80 or newer.
  int major = 0;
  NABLA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.device().index));
  return major >= 8;
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             bool causal, double scale, const Tensor& out, const Tensor& lse) {
  NABLA_ASSERT(flash_attention_supported(q, k, v), "flash_attention_forward: unsupported inputs");
  NABLA_ASSERT(out.sizes() == q.sizes() && out.dtype() == q.dtype() && out.device() == q.device() &&
                   out.stride(3) == 1,
               "flash_attention_forward: out must have q's shape, dtype and device and a unit last stride");
  NABLA_ASSERT(lse.is_contiguous() && lse.dtype() == kFloat32 && lse.device() == q.device() &&
                   lse.sizes() == (Shape{q.size(0), q.size(1), q.size(2)}),
               "flash_attention_forward: lse must be a contiguous float32 (B, H, Tq) tensor");
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3);
  NABLA_ASSERT(!mask.defined() || mask_fits(mask, B, H, Tq, Tk),
               "flash_attention_forward: the mask must be float32 (B|1, H|1, Tq, Tk)");
  if (B == 0 || H == 0 || Tq == 0) return;
  nabla::cuda::DeviceGuard device(q.device().index);
  const cudaStream_t stream = stream_for(q);
  const dim3 grid(static_cast<unsigned>((Tq + kQueryRows - 1) / kQueryRows), static_cast<unsigned>(H),
                  static_cast<unsigned>(B));
  dispatch_device<TypeSet::Floating>(q.dtype(), "flash_attention_forward", [&]<typename T>() {
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      const ForwardParams<T> params{
          .q = static_cast<const T*>(q.data_ptr()),
          .k = static_cast<const T*>(k.data_ptr()),
          .v = static_cast<const T*>(v.data_ptr()),
          .mask = mask.defined() ? static_cast<const float*>(mask.data_ptr()) : nullptr,
          .out = static_cast<T*>(out.data_ptr()),
          .lse = static_cast<float*>(lse.data_ptr()),
          .q_strides = strides_of(q),
          .k_strides = strides_of(k),
          .v_strides = strides_of(v),
          .mask_strides = mask.defined() ? strides_of(mask) : Strides{},
          .out_strides = strides_of(out),
          .H = static_cast<int>(H),
          .Tq = static_cast<int>(Tq),
          .Tk = static_cast<int>(Tk),
          .D = static_cast<int>(D),
          .group = static_cast<int>(H / k.size(1)),
          .scale = static_cast<float>(scale),
          .causal = causal,
          .vector_in = vector_ok(q) && vector_ok(k) && vector_ok(v),
          .vector_out = vector_ok(out)};
      dispatch_head_size(D, [&]<int kD>() {
        constexpr int bytes = forward_shared_bytes<kD>();
        allow_shared_memory(forward_kernel<T, kD>, bytes);
        forward_kernel<T, kD><<<grid, kThreads, bytes, stream>>>(params);
        NABLA_CUDA_CHECK_LAUNCH();
      });
    } else {
      NABLA_ASSERT(false, "flash_attention_forward: dtype is not float16 or bfloat16");
    }
  });
}

}  // namespace nabla::ops::cuda
