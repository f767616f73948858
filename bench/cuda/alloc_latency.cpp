// Microbenchmark: latency of an allocate/free pair through nabla's device allocator (the
// caching allocator unless NABLA_CUDA_ALLOC_CONF says backend:native) against raw
// cudaMalloc/cudaFree, for a few sizes. Host-side wall time, median of 5 rounds of N pairs.
//
//   ./build/cuda/bench/nabla_bench_alloc
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "nabla/core/allocator.h"
#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/runtime.h"

namespace {

template <typename Fn>
double median_us_per_pair(int pairs, Fn fn) {
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; ++i) fn();
    auto t1 = std::chrono::steady_clock::now();
    rounds.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / pairs);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace

int main() {
  if (!nabla::cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 1;
  }
  nabla::Allocator& cached = nabla::cuda::device_allocator(0);
  std::printf("%-10s %14s %14s %9s\n", "size", "nabla us/pair", "cudaMalloc us", "speedup");
  for (size_t bytes : {size_t{4} << 10, size_t{1} << 20, size_t{64} << 20}) {
    { auto warm = cached.allocate(bytes); }  // the first call may really allocate
    double nabla_us = median_us_per_pair(10000, [&] { auto p = cached.allocate(bytes); });
    double raw_us = median_us_per_pair(200, [&] {
      void* p = nullptr;
      NABLA_CUDA_CHECK(cudaMalloc(&p, bytes));
      NABLA_CUDA_CHECK(cudaFree(p));
    });
    std::printf("%-10zu %14.3f %14.3f %8.0fx\n", bytes, nabla_us, raw_us, raw_us / nabla_us);
  }
  return 0;
}
