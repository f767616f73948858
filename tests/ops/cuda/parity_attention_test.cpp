// Fused (flash-style) attention on CUDA against the float32 math path on the same GPU, forward
// and backward: float16 and bfloat16, head sizes 64 and 128, sequence lengths that are not tile
// multiples, Tq != Tk, causal, additive and boolean masks, the (B, T, H, D) -> (B, H, T, D)
// transposed layout a transformer passes, and q, k, v as views of one (B, T, 3C) projection (whose
// output and gradients the kernels may write at strides). The math path itself is checked against
// the CPU in float64, the kernels write strided outputs exactly as contiguous ones, and a memory
// test shows the fused path adds O(B H T D), not O(B H T^2), to the peak.
#include <cmath>
#include <iostream>
#include <limits>

#include "nabla/core/cuda/memory.h"
#include "nabla/ops/cuda/attention/kernels.h"
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

const Device kGpu = Device::cuda(0);

// ||a - b|| / ||b||, in float64 on the CPU.
double relative_error(const Tensor& a, const Tensor& b) {
  const Tensor d = a.to(Device::cpu(), kFloat64) - b.to(Device::cpu(), kFloat64);
  return std::sqrt((d * d).sum().item<double>() /
                   (b.to(Device::cpu(), kFloat64) * b.to(Device::cpu(), kFloat64)).sum().item<double>());
}

struct Case {
  int64_t B, H, Tq, Tk, D;
  bool causal;
  int mask;         // 0 none, 1 additive (B, 1, Tq, Tk), 2 boolean key padding (B, 1, 1, Tk)
  bool transposed;  // q, k, v as (B, T, H, D).transpose(1, 2)
  int64_t Hkv = 0;  // key/value heads (grouped-query attention); 0: H
  int64_t kv_heads() const { return Hkv == 0 ? H : Hkv; }
};

Tensor make(const Case& c, int64_t T, int64_t H, uint64_t seed, DType dtype) {
  if (c.transposed) {
    return random_input({c.B, T, H, c.D}, seed, kFloat32).to(kGpu, dtype).transpose(1, 2);
  }
  return random_input({c.B, H, T, c.D}, seed, kFloat32).to(kGpu, dtype);
}

Tensor make_mask(const Case& c, uint64_t seed) {
  if (c.mask == 1) return random_input({c.B, 1, c.Tq, c.Tk}, seed, kFloat32).to(kGpu);
  if (c.mask == 2) {
    // Batch b hides its last b + 3 keys; never every key of a row.
    const Tensor key =
        arange(static_cast<double>(c.Tk), {.dtype = kInt64, .device = kGpu}).view({1, 1, 1, c.Tk});
    const Tensor limit = (arange(static_cast<double>(c.B), {.dtype = kInt64, .device = kGpu}) * -1.0 +
                          static_cast<double>(c.Tk - 3))
                             .view({c.B, 1, 1, 1});
    return lt(key, limit);
  }
  return {};
}

struct Result {
  Tensor y, dq, dk, dv;
};

Result run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& dout, const Case& c,
           const Tensor& mask, DType dtype, AttentionBackend backend = AttentionBackend::automatic) {
  // Leaves of the computing dtype, so the float32 reference sees the same rounded values.
  const Tensor q = q0.to(dtype).detach().requires_grad_(true);
  const Tensor k = k0.to(dtype).detach().requires_grad_(true);
  const Tensor v = v0.to(dtype).detach().requires_grad_(true);
  const Tensor y = scaled_dot_product_attention(
      q, k, v, {.causal = c.causal, .mask = mask, .backend = backend, .enable_gqa = c.kv_heads() != c.H});
  y.backward(dout.to(dtype));
  return {y, q.grad(), k.grad(), v.grad()};
}

const char* name(AttentionBackend b) {
  return b == AttentionBackend::cudnn ? "cudnn" : "flash";
}

// Whether cuDNN takes the case, forward and backward (it may refuse on some cuDNN versions:
// attention/cudnn.cpp); the reason when it does not.
std::string cudnn_refusal(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                          bool causal) {
  const auto empty_like_q = [&] { return Tensor::empty(q.sizes(), q.options()); };
  const Tensor out = empty_like_q(),
               lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, {.dtype = kFloat32, .device = kGpu});
  std::string why;
  if (!ops::cuda::cudnn_attention_forward(q, k, v, causal, 0.125, out, lse, &why)) return "forward: " + why;
  const Tensor dq = empty_like_q(), dk = Tensor::empty(k.sizes(), k.options()),
               dv = Tensor::empty(v.sizes(), v.options());
  if (!ops::cuda::cudnn_attention_backward(dout, q, k, v, out, lse, causal, 0.125, /*deterministic=*/false,
                                           dq, dk, dv, &why)) {
    return "backward: " + why;
  }
  return "";
}

void expect_fused_matches_float32(const Case& c, DType dtype, AttentionBackend backend) {
  Fp32Exact exact;
  const uint64_t seed = test_seed() + static_cast<uint64_t>(c.Tq * 131 + c.D + c.mask * 7 + c.causal);
  const Tensor q = make(c, c.Tq, c.H, seed, dtype), k = make(c, c.Tk, c.kv_heads(), seed + 1, dtype),
               v = make(c, c.Tk, c.kv_heads(), seed + 2, dtype);
  const Tensor dout = random_input({c.B, c.H, c.Tq, c.D}, seed + 3, kFloat32).to(kGpu, dtype);
  const Tensor mask = make_mask(c, seed + 4);
  if (backend == AttentionBackend::cudnn) {
    if (mask.defined()) return;  // cuDNN's path takes no mask
    if (const std::string why = cudnn_refusal(q, k, v, dout, c.causal); !why.empty()) {
      std::cout << "cuDNN refused B" << c.B << " H" << c.H << " Tq" << c.Tq << " Tk" << c.Tk << " D" << c.D
                << ": " << why << "\n";
      return;
    }
  }
  const Result fused = run(q, k, v, dout, c, mask, dtype, backend);
  const Result ref = run(q, k, v, dout, c, mask, kFloat32);
  EXPECT_EQ(fused.y.dtype(), dtype);
  const double tol = dtype == kFloat16 ? 5e-3 : 2e-2;
  const std::string what =
      fmt::format("{} {} B{} H{} Hkv{} Tq{} Tk{} D{} causal {} mask {} transposed {}", name(backend),
                  dtype_name(dtype), c.B, c.H, c.kv_heads(), c.Tq, c.Tk, c.D, c.causal, c.mask, c.transposed);
  EXPECT_LT(relative_error(fused.y, ref.y), tol) << what;
  EXPECT_LT(relative_error(fused.dq, ref.dq), 2 * tol) << what << " dq";
  EXPECT_LT(relative_error(fused.dk, ref.dk), 2 * tol) << what << " dk";
  EXPECT_LT(relative_error(fused.dv, ref.dv), 2 * tol) << what << " dv";
}

// The user's backend choice that forces each route of the family (attention/routes.cpp): a route
// added there fails here until it has one, so no route skips the parity cases below.
AttentionBackend forcing(ops::cuda::AttentionRoute route) {
  switch (route) {
    case ops::cuda::AttentionRoute::Cudnn:
      return AttentionBackend::cudnn;
    case ops::cuda::AttentionRoute::Flash:
      return AttentionBackend::flash;
  }
  ADD_FAILURE() << "no parity case forces the route " << ops::cuda::route_name(route);
  return AttentionBackend::automatic;
}

// Every route of the fused-attention family, forced, against the float32 math path.
TEST(CudaAttention, FusedMatchesTheFloat32MathPath) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> cases = {
      {2, 3, 77, 77, 64, false, 0, false},   {2, 3, 77, 77, 64, true, 0, true},
      {1, 2, 50, 130, 64, false, 1, false},  {1, 2, 130, 50, 128, true, 0, false},
      {2, 2, 200, 200, 128, true, 2, false}, {2, 2, 65, 65, 128, false, 1, true},
      {1, 4, 256, 256, 64, true, 1, false},  {1, 1, 1, 33, 64, false, 0, false},
  };
  for (const ops::cuda::AttentionRoute route : ops::cuda::attention_routes()) {
    const AttentionBackend backend = forcing(route);
    EXPECT_EQ(ops::cuda::attention_route({.backend = backend}), route) << ops::cuda::route_name(route);
    for (DType dtype : {kFloat16, kBFloat16}) {
      for (const Case& c : cases) expect_fused_matches_float32(c, dtype, backend);
    }
  }
}

// Grouped-query attention on every route: 12 query heads over 1, 2, 4 and 12 key/value heads,
// causal and not, a mask, sequence lengths that are and are not tile multiples; the fused kernels
// read the shared heads and sum dk and dv over each group, against the math path's repeated heads.
// cuDNN must take the LLaMA shape (T 256, D 64, causal, no mask).
TEST(CudaAttention, GroupedQueryHeadsMatchTheFloat32MathPath) {
  SKIP_WITHOUT_GPU();
  for (const int64_t kv : {1, 2, 4, 12}) {
    const std::vector<Case> cases = {
        {2, 12, 256, 256, 64, true, 0, false, kv},
        {1, 12, 77, 77, 64, false, 0, true, kv},
        {1, 12, 100, 140, 128, false, 1, false, kv},
    };
    for (const ops::cuda::AttentionRoute route : ops::cuda::attention_routes()) {
      for (DType dtype : {kFloat16, kBFloat16}) {
        for (const Case& c : cases) expect_fused_matches_float32(c, dtype, forcing(route));
      }
    }
    // The first case is the LLaMA shape: cuDNN must take it, forward and backward.
    const Tensor q = make(cases[0], 256, 12, test_seed(), kBFloat16);
    const Tensor k = make(cases[0], 256, kv, test_seed() + 1, kBFloat16);
    const Tensor dout = make(cases[0], 256, 12, test_seed() + 2, kBFloat16);
    EXPECT_EQ(cudnn_refusal(q, k, k, dout, true), "") << kv << " kv heads";
  }
}

// cuDNN must take what a GPT passes (T a multiple of 128, D 64, causal, q, k, v views of one
// projection, the gradients written into one buffer), and agree with the math path there.
TEST(CudaAttention, CudnnTakesAndMatchesTheGptShape) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  const int64_t B = 2, T = 256, H = 4, D = 64, C = H * D;
  const uint64_t seed = test_seed();
  for (DType dtype : {kBFloat16, kFloat16}) {
    const Tensor qkv0 = random_input({B, T, 3 * C}, seed, kFloat32).to(kGpu, dtype);
    const Tensor dy = random_input({B, T, C}, seed + 1, kFloat32).to(kGpu, dtype);
    auto run_gpt = [&](DType compute, AttentionBackend backend) {
      const Tensor qkv = qkv0.to(compute).detach().requires_grad_(true);
      const TensorList parts = chunk(qkv, 3, -1);
      auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
      const Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                                    {.causal = true, .backend = backend});
      y.transpose(1, 2).reshape({B, T, C}).backward(dy.to(compute));
      return std::pair{y, qkv.grad()};
    };
    const auto [y, grad] = run_gpt(dtype, AttentionBackend::cudnn);  // throws if cuDNN refuses
    const auto [y_ref, grad_ref] = run_gpt(kFloat32, AttentionBackend::math);
    const double tol = dtype == kFloat16 ? 5e-3 : 2e-2;
    EXPECT_LT(relative_error(y, y_ref), tol) << dtype_name(dtype);
    EXPECT_LT(relative_error(grad, grad_ref), 2 * tol) << dtype_name(dtype);
  }
}

// q, k and v as a GPT makes them: chunk(qkv, 3, -1) of one (B, T, 3C) projection, each viewed as
// (B, T, H, D) and transposed to (B, H, T, D), and the output transposed back to (B, T, C). The
// front end may write the output and the gradients of q, k and v as strided views (of a
// (B, T, H, D) output and of one gradient buffer for qkv), which the kernels must honour.
TEST(CudaAttention, FusedMatchesTheFloat32MathPathOnQkvViews) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  const int64_t B = 2, T = 200, H = 3, D = 64, C = H * D;  // T is no multiple of the tiles
  const uint64_t seed = test_seed();
  for (AttentionBackend backend : {AttentionBackend::flash, AttentionBackend::automatic})
    for (DType dtype : {kBFloat16, kFloat16}) {
      const Tensor qkv0 = random_input({B, T, 3 * C}, seed, kFloat32).to(kGpu, dtype);
      const Tensor dy = random_input({B, T, C}, seed + 1, kFloat32).to(kGpu, dtype);
      auto run_gpt = [&](DType compute) {
        const Tensor qkv = qkv0.to(compute).detach().requires_grad_(true);  // a leaf, as the projection
        const TensorList parts = chunk(qkv, 3, -1);
        auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
        const Tensor y = scaled_dot_product_attention(
            heads(parts[0]), heads(parts[1]), heads(parts[2]),
            {.causal = true, .backend = compute == kFloat32 ? AttentionBackend::math : backend});
        y.transpose(1, 2).reshape({B, T, C}).backward(dy.to(compute));
        return std::pair{y, qkv.grad()};
      };
      const auto [y, grad] = run_gpt(dtype);
      const auto [y_ref, grad_ref] = run_gpt(kFloat32);
      EXPECT_EQ(y.dtype(), dtype);
      ASSERT_TRUE(grad.defined());
      EXPECT_EQ(grad.sizes(), (Shape{B, T, 3 * C}));
      const double tol = dtype == kFloat16 ? 5e-3 : 2e-2;
      const std::string what = fmt::format("{} {} qkv views B{} H{} T{} D{} causal",
                                           backend == AttentionBackend::flash ? "flash" : "automatic",
                                           dtype_name(dtype), B, H, T, D);
      EXPECT_LT(relative_error(y, y_ref), tol) << what;
      const TensorList g = chunk(grad, 3, -1), g_ref = chunk(grad_ref, 3, -1);
      const char* names[] = {"dq", "dk", "dv"};
      for (int i = 0; i < 3; ++i)
        EXPECT_LT(relative_error(g[i], g_ref[i]), 2 * tol) << what << " " << names[i];
    }
}

// The kernels themselves with out, dq, dk and dv as strided views, as the front end may pass them:
// out the (B, H, T, D) view of a (B, T, H, D) tensor and the gradients views of one (B, T, 3, H, D)
// buffer (16-byte stores), or the same inside buffers whose rows are 3 elements longer and start 1
// element in (misaligned: element stores). Each must equal what the kernels write to contiguous
// tensors (dq up to the order of its float32 atomics), and no element outside the views may change.
TEST(CudaAttention, FusedKernelsWriteStridedOutputs) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, H = 3, T = 200;
  const double sentinel = 7.0;
  for (const int64_t D : {64, 40}) {
    for (DType dtype : {kBFloat16, kFloat16}) {
      const TensorOptions options{.dtype = dtype, .device = kGpu};
      const TensorOptions float32{.dtype = kFloat32, .device = kGpu};
      const uint64_t seed = test_seed() + static_cast<uint64_t>(D);
      const Tensor qkv = random_input({B, T, 3, H, D}, seed, kFloat32).to(kGpu, dtype);
      const Tensor q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2),
                   v = qkv.select(2, 2).transpose(1, 2);
      const Tensor dout = random_input({B, T, H, D}, seed + 1, kFloat32).to(kGpu, dtype).transpose(1, 2);
      if (!ops::cuda::flash_attention_supported(q, k, v)) GTEST_SKIP() << "no fused attention on this GPU";
      const double scale = 1.0 / std::sqrt(static_cast<double>(D));
      const Tensor out = Tensor::empty({B, H, T, D}, options), lse = Tensor::empty({B, H, T}, float32);
      const Tensor dq = Tensor::empty({B, H, T, D}, options), dk = Tensor::empty({B, H, T, D}, options),
                   dv = Tensor::empty({B, H, T, D}, options);
      ops::cuda::flash_attention_forward(q, k, v, Tensor(), true, scale, out, lse);
      ops::cuda::flash_attention_backward(dout, q, k, v, out, lse, Tensor(), true, scale, dq, dk, dv);
      for (const bool aligned : {true, false}) {
        const int64_t pad = aligned ? 0 : 3, skip = aligned ? 0 : 1;
        const Tensor out_buffer = full({B, T, H, D + pad}, sentinel, options);
        const Tensor grad_buffer = full({B, T, 3, H, D + pad}, sentinel, options);
        const Tensor out_s = out_buffer.narrow(3, skip, D).transpose(1, 2);
        auto grad_view = [&](int64_t i) {
          return grad_buffer.select(2, i).narrow(3, skip, D).transpose(1, 2);
        };
        const Tensor dq_s = grad_view(0), dk_s = grad_view(1), dv_s = grad_view(2);
        const Tensor lse_s = Tensor::empty({B, H, T}, float32);
        ops::cuda::flash_attention_forward(q, k, v, Tensor(), true, scale, out_s, lse_s);
        ops::cuda::flash_attention_backward(dout, q, k, v, out_s, lse_s, Tensor(), true, scale, dq_s, dk_s,
                                            dv_s);
        const std::string what =
            fmt::format("{} D{} {}", dtype_name(dtype), D, aligned ? "aligned" : "misaligned");
        EXPECT_TRUE(all_close(out_s, out, 0, 0)) << what << " out";
        EXPECT_TRUE(all_close(lse_s, lse, 0, 0)) << what << " lse";
        EXPECT_TRUE(all_close(dk_s, dk, 0, 0)) << what << " dk";
        EXPECT_TRUE(all_close(dv_s, dv, 0, 0)) << what << " dv";
        const double ulp = dtype == kFloat16 ? 2e-3 : 1e-2;  // a rounding step or so
        EXPECT_TRUE(all_close(dq_s, dq, ulp, ulp)) << what << " dq";
        if (!aligned) {
          for (const Tensor& buffer : {out_buffer, grad_buffer}) {
            const int64_t last = buffer.dim() - 1;
            const Tensor before = buffer.narrow(last, 0, skip),
                         after = buffer.narrow(last, skip + D, pad - skip);
            EXPECT_TRUE(all_close(before, full_like(before, sentinel), 0, 0)) << what << " padding";
            EXPECT_TRUE(all_close(after, full_like(after, sentinel), 0, 0)) << what << " padding";
          }
        }
      }
    }
  }
}

TEST(CudaAttention, MathPathMatchesTheCpuInFloat64) {
  SKIP_WITHOUT_GPU();
  const Tensor q = random_input({2, 2, 9, 8}, test_seed()), k = random_input({2, 2, 11, 8}, test_seed() + 1);
  const Tensor v = random_input({2, 2, 11, 5}, test_seed() + 2),
               bias = random_input({9, 11}, test_seed() + 3);
  const AttentionOptions cpu{.causal = true, .mask = bias}, gpu{.causal = true, .mask = bias.to(kGpu)};
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), gpu),
                        scaled_dot_product_attention(q, k, v, cpu), 1e-12, 1e-12));
}

TEST(CudaAttention, FusedMemoryGrowsWithTNotTSquared) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 1, H = 8, T = 8192, D = 64;
  const Tensor q = randn({B, H, T, D}, {.dtype = kBFloat16, .device = kGpu}).requires_grad_(true);
  const Tensor k = randn({B, H, T, D}, {.dtype = kBFloat16, .device = kGpu}).requires_grad_(true);
  const Tensor v = randn({B, H, T, D}, {.dtype = kBFloat16, .device = kGpu}).requires_grad_(true);
  const Tensor dout = randn({B, H, T, D}, {.dtype = kBFloat16, .device = kGpu});
  cuda::synchronize();
  const size_t base = cuda::memory_allocated();
  cuda::reset_peak_memory_stats();
  const Tensor y = scaled_dot_product_attention(q, k, v, {.causal = true});
  y.backward(dout);
  cuda::synchronize();
  const double added = static_cast<double>(cuda::max_memory_allocated() - base);
  const double qkv = static_cast<double>(B * H * T * D * 2);  // one (B, H, T, D) bfloat16 tensor
  const double scores = static_cast<double>(B * H * T * T * 2);
  // The output, the gradients of q, k and v, a float32 dq accumulator and row statistics: a
  // handful of qkv-sized tensors. One bfloat16 score matrix alone would be 128x one of them.
  EXPECT_LT(added, 12 * qkv) << "added " << added / (1 << 20) << " MiB; one score matrix is "
                             << scores / (1 << 20) << " MiB";
  EXPECT_TRUE(std::isfinite(q.grad().to(kFloat32).abs().sum().item<double>()));
}

}  // namespace
}  // namespace nabla
