// Microbenchmark: CPU training throughput of SmallCnn (nabla-train's default Fashion-MNIST model)
// at batch 128 on random input: forward + cross-entropy + backward + SGD (nesterov), the step
// nabla-train runs, without the data loader. Compare with /work/shared/bench/torch_cpu_fmnist.py.
//
//   ./build/cuda/bench/nabla_bench_cpu_small_cnn [steps, default 40] [batch, default 128] [ops, default 1]
//
// With ops 0 the per-op table is skipped (so that a profile of the run shows the step alone).
//
// Prints img/s over wall time and the process CPU time (user + sys) per step, so that spinning
// OpenMP threads show up, then a per-phase split (forward / backward / optimizer) and the time
// of each layer's forward op alone on the same shapes (no autograd), to show where time goes.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "nabla/nabla.h"

namespace {

using nabla::Tensor;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return sec(usage.ru_utime) + sec(usage.ru_stime);
}

// Median milliseconds of `runs` calls after 2 warm-ups.
double median_ms(const std::function<void()>& fn, int runs) {
  for (int i = 0; i < 2; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    fn();
    times.push_back(1e3 * seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 40;
  const int64_t batch = argc > 2 ? std::max(1, std::atoi(argv[2])) : 128;
  nabla::manual_seed(0);
  nabla::nn::models::SmallCnn model;
  model.train();
  nabla::optim::SGD sgd(model.parameters(),
                        {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  const Tensor x = nabla::randn({batch, 1, 28, 28});
  const Tensor y = nabla::randint(0, 10, {batch});

  double fwd = 0, bwd = 0, opt = 0;
  auto step = [&](bool timed) {
    auto t0 = Clock::now();
    Tensor loss = nabla::cross_entropy(model.forward(x), y);
    auto t1 = Clock::now();
    loss.backward();
    auto t2 = Clock::now();
    sgd.step();
    sgd.zero_grad();
    auto t3 = Clock::now();
    if (timed) {
      fwd += std::chrono::duration<double>(t1 - t0).count();
      bwd += std::chrono::duration<double>(t2 - t1).count();
      opt += std::chrono::duration<double>(t3 - t2).count();
    }
  };
  for (int i = 0; i < 3; ++i) step(false);
  const double cpu0 = cpu_seconds();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step(true);
  const double wall = seconds_since(start), cpu = cpu_seconds() - cpu0;
  std::printf("SmallCnn CPU train step, batch %lld, %d steps, %d OpenMP threads\n",
              static_cast<long long>(batch), steps, omp_get_max_threads());
  std::printf("  %.1f img/s   %.1f ms/step wall   %.1f ms/step CPU (user+sys)\n",
              static_cast<double>(batch) * steps / wall, 1e3 * wall / steps, 1e3 * cpu / steps);
  std::printf("  forward %.1f ms   backward %.1f ms   sgd+zero_grad %.1f ms (per step)\n", 1e3 * fwd / steps,
              1e3 * bwd / steps, 1e3 * opt / steps);

  if (argc > 3 && std::atoi(argv[3]) == 0) return 0;
  // Each layer's forward alone, no autograd, on the shapes the model sees.
  nabla::NoGradGuard no_grad;
  const Tensor a1 = model.conv1(x), p1 = model.pool(nabla::relu(model.bn1(a1)));
  const Tensor a2 = model.conv2(p1), p2 = model.pool(nabla::relu(model.bn2(a2)));
  const Tensor flat = p2.flatten(1), h = model.fc1(flat);
  const int runs = 10;
  struct Row {
    const char* name;
    std::function<void()> fn;
  };
  const std::vector<Row> rows = {
      {"conv1 1>32 3x3 28x28", [&] { (void)model.conv1(x); }},
      {"bn1 (train)", [&] { (void)model.bn1(a1); }},
      {"relu 32x28x28", [&] { (void)nabla::relu(a1); }},
      {"maxpool 2x2 32x28x28", [&] { (void)model.pool(a1); }},
      {"conv2 32>64 3x3 14x14", [&] { (void)model.conv2(p1); }},
      {"bn2 (train)", [&] { (void)model.bn2(a2); }},
      {"maxpool 2x2 64x14x14", [&] { (void)model.pool(a2); }},
      {"fc1 3136>128", [&] { (void)model.fc1(flat); }},
      {"fc2 128>10", [&] { (void)model.fc2(h); }},
  };
  std::printf("  forward ops alone (median of %d, ms):\n", runs);
  for (const Row& row : rows) std::printf("    %-24s %8.3f\n", row.name, median_ms(row.fn, runs));
  return 0;
}
