// The Gloo process group with 2-4 real processes: every collective against the result computed
// in one process from every rank's (seeded) input, and the failure paths: a rank that dies and a
// rank that hangs make the others fail with a clear error within the timeout.
#if defined(NABLA_HAS_GLOO)

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "multiprocess.h"
#include "nabla/distributed/gloo/process_group_gloo.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

using testing::expect_all_succeeded;
using testing::run_ranks;

// Rank r's input: random, non-zero, different on every rank, reproducible from (seed, r).
Tensor rank_input(uint64_t seed, int rank, int64_t n, DType dtype) {
  Tensor t = nabla::testing::random_input({n}, seed + 7919 * rank, kFloat64) * 10.0;
  return dtype == kInt64 || dtype == kInt32 ? t.to(dtype) : t.to(dtype);
}

void check_close(const Tensor& actual, const Tensor& expected, const char* what) {
  auto ok = nabla::testing::all_close(actual, expected, 1e-6, 1e-6);
  RANK_CHECK(ok, "{}: {}", what, ok.message());
}

class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, MatchTheSingleProcessResult) {
  const int world = GetParam();
  const uint64_t seed = nabla::testing::test_seed();
  auto results = run_ranks(world, [seed](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    for (DType dtype : {kFloat32, kFloat64, kInt64}) {
      const int64_t n = 1000 + 3;  // not a multiple of anything convenient
      std::vector<Tensor> all;
      for (int r = 0; r < world; ++r) all.push_back(rank_input(seed, r, n, dtype).to(kFloat64));
      Tensor sum = all[0].clone(), mx = all[0].clone(), mn = all[0].clone();
      for (int r = 1; r < world; ++r) {
        sum = sum + all[r];
        mx = maximum(mx, all[r]);
        mn = minimum(mn, all[r]);
      }
      for (auto [op, expected] :
           {std::pair{ReduceOp::sum, sum}, std::pair{ReduceOp::max, mx}, std::pair{ReduceOp::min, mn}}) {
        Tensor t = rank_input(seed, rank, n, dtype);
        group.allreduce(t, op)->wait();
        check_close(t, expected, to_string(op));
      }
      if (dtype != kInt64) {
        Tensor t = rank_input(seed, rank, n, dtype);
        group.allreduce(t, ReduceOp::average)->wait();
        check_close(t, sum / static_cast<double>(world), "average");
      }
      // Broadcast from the last rank.
      Tensor b = rank_input(seed, rank, n, dtype);
      group.broadcast(b, world - 1)->wait();
      check_close(b, all[world - 1], "broadcast");
      // Allgather: every rank's input in rank order.
      Tensor gathered = Tensor::empty({n * world}, {.dtype = dtype});
      group.allgather(gathered, rank_input(seed, rank, n, dtype))->wait();
      check_close(gathered, cat(all, 0), "allgather");
    }
    // Reduce-scatter: chunk r of the sum lands on rank r.
    const int64_t chunk = 17;
    std::vector<Tensor> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(rank_input(seed + 1, r, chunk * world, kFloat64));
    Tensor total = inputs[0].clone();
    for (int r = 1; r < world; ++r) total = total + inputs[r];
    Tensor out = Tensor::empty({chunk}, {.dtype = kFloat64});
    group.reduce_scatter(out, inputs[rank])->wait();
    check_close(out, total.slice(0, rank * chunk, (rank + 1) * chunk), "reduce_scatter");
    group.barrier()->wait();
  });
  expect_all_succeeded(results);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectives, ::testing::Values(2, 3, 4));

TEST(GlooFailures, AsyncWorkOverlapsAndCompletesInOrder) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 8; ++i) {
      ts.push_back(full({256}, static_cast<double>(i + rank), {.dtype = kFloat64}));
      works.push_back(group.allreduce(ts.back()));
    }
    for (int i = 0; i < 8; ++i) {
      works[i]->wait();
      RANK_CHECK(works[i]->is_completed());
      RANK_CHECK(ts[i].to_vector<double>()[0] == 2.0 * i + 1, "bucket {}", i);
    }
  });
  expect_all_succeeded(results);
}

TEST(GlooFailures, ADeadRankMakesTheOthersFailWithinTheTimeout) {
  auto results = run_ranks(3, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(3)});
    // Rank 2 dies once every rank has connected (so the others fail in the collective, not while
    // still connecting to it, whatever the machine's load), and before the collective.
    store.add("connected", 1);
    if (rank == 2) {
      while (store.add("connected", 0) < world) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ::_exit(7);
    }
    Tensor t = full({1 << 16}, 1.0, {.dtype = kFloat32});
    auto start = std::chrono::steady_clock::now();
    try {
      group.allreduce(t)->wait();
    } catch (const CollectiveError& e) {
      auto waited = std::chrono::steady_clock::now() - start;
      RANK_CHECK(waited < std::chrono::seconds(10), "took too long");
      std::string what = e.what();
      RANK_CHECK(what.find("allreduce") != std::string::npos, "message: {}", what);
      RANK_CHECK(what.find(fmt::format("rank {}", rank)) != std::string::npos, "message: {}", what);
      return;
    }
    throw std::runtime_error("allreduce succeeded although rank 2 died");
  });
  EXPECT_EQ(results[2].exit_code, 7);
  EXPECT_EQ(results[0].exit_code, 0) << results[0].message;
  EXPECT_EQ(results[1].exit_code, 0) << results[1].message;
}

TEST(GlooFailures, AHangingRankMakesTheOthersTimeOut) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::milliseconds(1500)});
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(8));  // never joins the collective
      ::_exit(0);
    }
    Tensor t = full({64}, 1.0, {.dtype = kFloat32});
    auto start = std::chrono::steady_clock::now();
    try {
      group.allreduce(t)->wait();
    } catch (const CollectiveError& e) {
      RANK_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(7), "took too long");
      RANK_CHECK(std::string(e.what()).find("1.5 s") != std::string::npos, "message: {}", e.what());
      return;
    }
    throw std::runtime_error("allreduce succeeded although rank 1 hung");
  });
  EXPECT_EQ(results[0].exit_code, 0) << results[0].message;
}

TEST(GlooFailures, BadArgumentsAreClearErrors) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world);
    Tensor half_t = full({4}, 1.0, {.dtype = kFloat16});
    try {
      group.allreduce(half_t)->wait();
      throw std::runtime_error("float16 allreduce should be refused");
    } catch (const Error& e) {
      RANK_CHECK(std::string(e.what()).find("float16") != std::string::npos, "{}", e.what());
    }
    Tensor out = Tensor::empty({3}, {.dtype = kFloat32});
    try {
      group.allgather(out, full({2}, 1.0, {.dtype = kFloat32}));
      throw std::runtime_error("a wrongly sized allgather output should be refused");
    } catch (const Error& e) {
      RANK_CHECK(std::string(e.what()).find("world size (2)") != std::string::npos, "{}", e.what());
    }
    group.barrier()->wait();
  });
  expect_all_succeeded(results);
}

}  // namespace
}  // namespace nabla::distributed

#endif  // NABLA_HAS_GLOO
