// nabla::profiler on the GPU: each op's two events bracket its kernels, so a large matmul shows
// device time, the rows add up to no more than the span from the first op to the last, and a
// backward node owns the matmuls it runs.
#include <algorithm>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

TEST(CudaProfiler, TimesOpsOnTheDeviceWithinTheSpan) {
  SKIP_WITHOUT_GPU();
  Generator gen(5);
  const Tensor a = randn({2048, 2048}, {}, &gen).to(Device::cuda(0)).requires_grad_();
  const Tensor b = randn({2048, 2048}, {}, &gen).to(Device::cuda(0));
  (void)matmul(a, b);  // warm: cuBLAS handles, workspace
  cuda::synchronize();
  profiler::start();
  for (int i = 0; i < 3; ++i) sum(matmul(a, b)).backward();
  const profiler::Report r = profiler::stop();
  const auto row = [&](const std::string& op) {
    const auto it = std::find_if(r.ops.begin(), r.ops.end(), [&](const auto& t) { return t.op == op; });
    return it == r.ops.end() ? profiler::OpTime{} : *it;
  };
  const profiler::OpTime mm = row("matmul"), back = row("matmul (backward)");
  EXPECT_EQ(mm.calls, 3) << profiler::table(r);
  EXPECT_EQ(back.calls, 3) << profiler::table(r);
  // 2 * 2048^3 flops take well over a microsecond on any GPU, and under a second.
  EXPECT_GT(mm.device_ms, 3 * 0.001) << profiler::table(r);
  EXPECT_LT(mm.device_ms, 3 * 1000.0);
  EXPECT_GT(back.device_ms, 0.0);
  double total = 0;
  for (const auto& t : r.ops) total += t.device_ms;
  EXPECT_GT(r.span_ms, 0.0);
  EXPECT_LE(total, r.span_ms * 1.001 + 0.01) << profiler::table(r);
}

}  // namespace
}  // namespace nabla
