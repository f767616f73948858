// Rotary embeddings' CUDA kernel (ops/cuda/rotary/rotary.cu) against the CPU loop: float64 to
// 1e-12 and the 16-bit dtypes and float32 within their rounding, both pairings, offsets, q and k
// as transposed views of (B, T, H, D) projections, the backward (the inverse rotation), and
// rotary_embedding's on-device tables.
#include "parity_util.h"
#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

const Device kGpu = Device::cuda(0);

TEST(CudaRotary, KernelMatchesTheCpuForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  for (bool interleaved : {false, true}) {
    const RotaryCacheOptions options{
        .base = 500000, .interleaved = interleaved, .scaling = RotaryScaling{.original_max_positions = 64}};
    const RotaryCache cpu(64, 300, options);
    RotaryCacheOptions on_gpu = options;
    on_gpu.device = kGpu;
    const RotaryCache gpu(64, 300, on_gpu);
    for (DType dtype : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
      const uint64_t seed = test_seed() + static_cast<uint64_t>(dtype) * 2 + interleaved;
      // (B, T, H, D) viewed as (B, H, T, D); T 130 from position 77.
      const Tensor x = random_input({2, 130, 3, 64}, seed, kFloat64).to(dtype);
      const Tensor g = random_input({2, 3, 130, 64}, seed + 1, kFloat64).to(dtype);
      const Tensor x_cpu = x.transpose(1, 2).detach().requires_grad_(true);
      const Tensor x_gpu = x.to(kGpu).transpose(1, 2).detach().requires_grad_(true);
      const Tensor y_cpu = cpu(x_cpu, 77), y_gpu = gpu(x_gpu, 77);
      y_cpu.backward(g);
      y_gpu.backward(g.to(kGpu));
      const double tol = dtype == kFloat64    ? 1e-12
                         : dtype == kFloat32  ? 1e-6
                         : dtype == kBFloat16 ? 1e-2
                                              : 2e-3;
      const std::string what = fmt::format("{} interleaved {}", dtype_name(dtype), interleaved);
      EXPECT_EQ(y_gpu.dtype(), dtype) << what;
      EXPECT_TRUE(all_close(y_gpu.to(Device::cpu()), y_cpu, tol, tol)) << what;
      EXPECT_TRUE(all_close(x_gpu.grad().to(Device::cpu()), x_cpu.grad(), tol, tol)) << what << " grad";
      EXPECT_TRUE(y_gpu.transpose(1, 2).is_contiguous()) << what << ": the output keeps the input's layout";
    }
  }
}

TEST(CudaRotary, RotaryEmbeddingBuildsItsTablesOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const Tensor x = random_input({2, 4, 33, 16}, test_seed(), kFloat64);
  for (bool interleaved : {false, true}) {
    const RotaryOptions o{.base = 1000, .offset = 5, .interleaved = interleaved};
    EXPECT_TRUE(
        all_close(rotary_embedding(x.to(kGpu), o).to(Device::cpu()), rotary_embedding(x, o), 1e-12, 1e-12));
    EXPECT_TRUE(all_close(rotary_embedding(x.to(kGpu, kBFloat16), o).to(Device::cpu(), kFloat64),
                          rotary_embedding(x, o), 2e-2, 2e-2));
  }
}

}  // namespace
}  // namespace nabla
