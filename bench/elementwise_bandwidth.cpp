// Microbenchmark: the bandwidth of nabla's contiguous elementwise CUDA kernels, against a
// device-to-device cudaMemcpyAsync of the same size (the practical ceiling).
//
//   ./build/cuda/bench/nabla_bench_elementwise [MiB per tensor, default 256] [runs, default 50]
//
// Each row is timed with CUDA events on the current stream after warm-up runs; the median of
// the runs is reported. GB/s counts bytes read plus bytes written (1 GB = 1e9 bytes), so a copy
// of N bytes moves 2N. The kernel rows call the CUDA entry points (ops/cuda/elementwise/kernels.h) on
// preallocated tensors, so they time the kernels alone; the last row is the public op, output
// allocation included. Target (CUDA backend issue): contiguous elementwise >= 80% of memcpy.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "nabla/core/cuda/stream.h"
#include "nabla/nabla.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "timing.h"

namespace {

using nabla::Device;
using nabla::Tensor;

struct Row {
  std::string name;
  double bytes;  // read + written per run
  double ms;     // median
  bool kernel;   // counts towards the target
};

using nabla::bench::median_ms;

}  // namespace

int main(int argc, char** argv) {
  if (!nabla::cuda::is_available()) {
    std::fprintf(stderr, "nabla_bench_elementwise: no CUDA device\n");
    return 1;
  }
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 256;
  const int runs = argc > 2 ? std::max(20, std::atoi(argv[2])) : 50;
  const int warmup = 5;
  const double tensor_bytes = static_cast<double>(mib) * 1024 * 1024;
  const int64_t n32 = mib * 1024 * 1024 / 4;  // float32 elements per tensor
  const int64_t n16 = mib * 1024 * 1024 / 2;  // float16 elements per tensor
  const Device gpu = Device::cuda();
  namespace kernels = nabla::ops::cuda;
  using nabla::ops::BinaryOp;
  using nabla::ops::UnaryOp;

  Tensor a = nabla::randn({n32}, {.device = gpu}), b = nabla::randn({n32}, {.device = gpu});
  Tensor out = nabla::empty({n32}, {.device = gpu});
  Tensor h1 = nabla::randn({n16}, {.dtype = nabla::kFloat16, .device = gpu});
  Tensor h2 = nabla::randn({n16}, {.dtype = nabla::kFloat16, .device = gpu});
  Tensor hout = nabla::empty({n16}, {.dtype = nabla::kFloat16, .device = gpu});
  Tensor bout = nabla::empty({n32}, {.dtype = nabla::kBFloat16, .device = gpu});

  std::vector<Row> rows;
  auto add_row = [&](std::string name, double bytes, bool kernel, const std::function<void()>& fn) {
    rows.push_back({std::move(name), bytes, median_ms(fn, runs, warmup), kernel});
  };
  add_row("memcpy D2D (cudaMemcpyAsync)", 2 * tensor_bytes, false, [&] {
    nabla::cuda::copy_bytes(out.data_ptr(), gpu, a.data_ptr(), gpu, static_cast<size_t>(tensor_bytes));
  });
  add_row("copy float32 (kernel)", 2 * tensor_bytes, true, [&] { kernels::copy(a, out); });
  add_row("add float32 a+b", 3 * tensor_bytes, true, [&] { kernels::binary(BinaryOp::Add, a, b, out, 1.0); });
  add_row("mul float32 a*2.5", 2 * tensor_bytes, true,
          [&] { kernels::unary(UnaryOp::MulScalar, a, out, {.a = 2.5}); });
  add_row("relu float32", 2 * tensor_bytes, true, [&] { kernels::unary(UnaryOp::Relu, a, out, {}); });
  add_row("add float16 a+b", 3 * tensor_bytes, true,
          [&] { kernels::binary(BinaryOp::Add, h1, h2, hout, 1.0); });
  add_row("cast float32->bfloat16", 1.5 * tensor_bytes, true, [&] { kernels::copy(a, bout); });
  add_row("nabla::add float32 (allocates)", 3 * tensor_bytes, false, [&] { Tensor c = a + b; });

  const double memcpy_gbps = rows[0].bytes / (rows[0].ms * 1e6);
  std::printf("nabla elementwise bandwidth: %lld MiB per tensor, median of %d runs after %d warm-ups\n",
              static_cast<long long>(mib), runs, warmup);
  std::printf("%-34s %12s %10s %12s\n", "op", "time (us)", "GB/s", "% of memcpy");
  double worst = 1e9;
  for (const Row& r : rows) {
    double gbps = r.bytes / (r.ms * 1e6);
    std::printf("%-34s %12.1f %10.1f %11.1f%%\n", r.name.c_str(), r.ms * 1e3, gbps,
                100.0 * gbps / memcpy_gbps);
    if (r.kernel) worst = std::min(worst, 100.0 * gbps / memcpy_gbps);
  }
  std::printf("slowest contiguous kernel: %.1f%% of memcpy (target >= 80%%): %s\n", worst,
              worst >= 80.0 ? "PASS" : "FAIL");
  return 0;
}
