// The NCCL process group and DDP on real GPUs. One-rank cases run on any GPU machine; two-rank
// cases need two GPUs and start this binary again as ranks (spawn.h). Each rank checks its
// results against values computed on the CPU from every rank's seeded input.
#include <gtest/gtest.h>

#include <filesystem>

#include "nabla/distributed/ddp.h"
#include "nabla/distributed/process_group_nccl.h"
#include "spawn.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

using testing::spawn_ranks;
using testing::spawned_rank;
using testing::spawned_world;

bool has_gpus(int n) {
  return cuda::is_available() && cuda::device_count() >= n;
}

Tensor rank_input(int rank, int64_t n, DType dtype) {
  Tensor t = nabla::testing::random_input({n}, 1000 + 7919 * rank, kFloat64) * 4.0;
  return t.to(dtype);
}

std::unique_ptr<TcpStore> client_store() {
  return std::make_unique<TcpStore>(std::getenv("MASTER_ADDR"), std::atoi(std::getenv("MASTER_PORT")),
                                    TcpStoreOptions{.is_server = false});
}

void check_collectives(ProcessGroup& group, Device device) {
  const int world = group.size(), rank = group.rank();
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kInt64}) {
    const int64_t n = 4099;
    std::vector<Tensor> all;
    for (int r = 0; r < world; ++r) all.push_back(rank_input(r, n, dtype).to(kFloat64));
    Tensor sum = all[0].clone(), mx = all[0].clone();
    for (int r = 1; r < world; ++r) {
      sum = sum + all[r];
      mx = maximum(mx, all[r]);
    }
    // Half types round the sum once per rank: tolerance in units of their epsilon.
    double tol = dtype == kFloat16 ? 4e-3 : dtype == kBFloat16 ? 3e-2 : 1e-6;
    Tensor t = rank_input(rank, n, dtype).to(device);
    group.allreduce(t)->wait();
    EXPECT_TRUE(nabla::testing::all_close(t, sum, tol, tol)) << dtype_name(dtype) << " sum";
    t = rank_input(rank, n, dtype).to(device);
    group.allreduce(t, ReduceOp::max)->wait();
    EXPECT_TRUE(nabla::testing::all_close(t, mx, 0, 0)) << dtype_name(dtype) << " max";
    if (is_floating(dtype)) {
      t = rank_input(rank, n, dtype).to(device);
      group.allreduce(t, ReduceOp::average)->wait();
      EXPECT_TRUE(nabla::testing::all_close(t, sum / static_cast<double>(world), tol, tol)) << "average";
    }
    Tensor b = rank_input(rank, n, dtype).to(device);
    group.broadcast(b, world - 1)->wait();
    EXPECT_TRUE(nabla::testing::all_close(b, all[world - 1], 0, 0)) << "broadcast";
    Tensor gathered = Tensor::empty({n * world}, {.dtype = dtype, .device = device});
    group.allgather(gathered, rank_input(rank, n, dtype).to(device))->wait();
    EXPECT_TRUE(nabla::testing::all_close(gathered, cat(all, 0), 0, 0)) << "allgather";
  }
  const int64_t chunk = 33;
  std::vector<Tensor> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(rank_input(r + 50, chunk * world, kFloat32));
  Tensor total = inputs[0].to(kFloat64);
  for (int r = 1; r < world; ++r) total = total + inputs[r].to(kFloat64);
  Tensor out = Tensor::empty({chunk}, {.dtype = kFloat32, .device = device});
  group.reduce_scatter(out, inputs[rank].to(device))->wait();
  EXPECT_TRUE(nabla::testing::all_close(out, total.slice(0, rank * chunk, (rank + 1) * chunk), 1e-5, 1e-5));
  group.barrier()->wait();
}

TEST(CudaNccl, OneRankCollectives) {
  if (!has_gpus(1)) GTEST_SKIP() << "no CUDA device";
  TcpStore store("127.0.0.1", 0, {.is_server = true});
  ProcessGroupNccl group(store, 0, 1);
  check_collectives(group, Device::cuda(cuda::current_device()));
}

// Sets NABLA_NCCL_LAUNCH for the groups built in this scope.
class LaunchMode {
 public:
  explicit LaunchMode(const char* mode) { ::setenv("NABLA_NCCL_LAUNCH", mode, 1); }
  ~LaunchMode() { ::unsetenv("NABLA_NCCL_LAUNCH"); }
  LaunchMode(const LaunchMode&) = delete;
  LaunchMode& operator=(const LaunchMode&) = delete;
};

// Writes fresh values into `t` at the end of a few milliseconds of queued compute, so a
// collective that ran before its inputs were ready would read the old ones.
void slow_fill(Tensor& t, uint64_t seed) {
  const Device device = t.device();
  Tensor a = nabla::testing::random_input({2048, 2048}, seed, kFloat32).to(device) * (1.0 / 2048);
  Tensor m = a;
  for (int i = 0; i < 24; ++i) m = matmul(m, a);
  t.copy_(nabla::testing::random_input(t.sizes(), seed + 1, kFloat32).to(device) + m.sum() * 0.0);
}

TEST(CudaNccl, WhenReadyLaunchesAfterTheInputsInOrderAndDrainsOnDestruction) {
  if (!has_gpus(1)) GTEST_SKIP() << "no CUDA device";
  LaunchMode mode("when-ready");
  const Device device = Device::cuda(cuda::current_device());
  TcpStore store("127.0.0.1", 0, {.is_server = true});
  const int64_t n = 1 << 16;
  std::vector<Tensor> in, out;
  {
    ProcessGroupNccl group(store, 0, 1);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 4; ++k) {
      in.push_back(zeros({n}, {.dtype = kFloat32, .device = device}));
      out.push_back(zeros({n}, {.dtype = kFloat32, .device = device}));
      slow_fill(in[k], nabla::testing::test_seed() + 10 * k);
      works.push_back(group.allgather(out[k], in[k]));
    }
    works[1]->wait();  // not the newest: the host waits until the launcher has it out
    group.launch_pending();
    works[3]->wait();
    works[0]->wait();
    works[2]->wait();
    for (int k = 0; k < 4; ++k) EXPECT_TRUE(nabla::testing::all_close(out[k], in[k], 0, 0)) << k;
    // Queued and never waited for: the group's destructor launches it before it goes.
    Tensor late_in = zeros({n}, {.dtype = kFloat32, .device = device});
    slow_fill(late_in, nabla::testing::test_seed() + 99);
    in.push_back(late_in);
    out.push_back(zeros({n}, {.dtype = kFloat32, .device = device}));
    group.allgather(out.back(), late_in);
  }
  cuda::synchronize();
  EXPECT_TRUE(nabla::testing::all_close(out.back(), in.back(), 0, 0));
}

TEST(CudaNccl, TwoRankCollectives) {
  if (!has_gpus(2)) GTEST_SKIP() << "needs two GPUs";
  auto codes = spawn_ranks(2, "NcclRank.Collectives");
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(CudaNccl, TwoRankCollectivesEager) {
  if (!has_gpus(2)) GTEST_SKIP() << "needs two GPUs";
  auto codes =
      spawn_ranks(2, "NcclRank.Collectives", std::chrono::seconds(120), {{"NABLA_NCCL_LAUNCH", "eager"}});
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(NcclRank, Collectives) {
  if (spawned_rank() < 0) GTEST_SKIP() << "runs only as a rank started by CudaNccl.TwoRankCollectives";
  cuda::set_device(spawned_rank());
  auto store = client_store();
  ProcessGroupNccl group(*store, spawned_rank(), spawned_world());
  check_collectives(group, Device::cuda(spawned_rank()));
}

struct Mlp : nn::Module {
  nn::Linear fc1{{.in = 32, .out = 256}}, fc2{{.in = 256, .out = 256}}, fc3{{.in = 256, .out = 8}};
  Mlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}}); }
  Tensor forward(const Tensor& x) override { return fc3(tanh(fc2(relu(fc1(x))))); }
};

TEST(CudaNccl, TwoRankDdpMatchesOneProcess) {
  if (!has_gpus(2)) GTEST_SKIP() << "needs two GPUs";
  auto codes = spawn_ranks(2, "NcclRank.Ddp");
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(CudaNccl, TwoRankDdpEager) {
  if (!has_gpus(2)) GTEST_SKIP() << "needs two GPUs";
  auto codes = spawn_ranks(2, "NcclRank.Ddp", std::chrono::seconds(120), {{"NABLA_NCCL_LAUNCH", "eager"}});
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(NcclRank, Ddp) {
  if (spawned_rank() < 0)
    GTEST_SKIP() << "runs only as a rank started by CudaNccl.TwoRankDdpMatchesOneProcess";
  const int rank = spawned_rank(), world = spawned_world();
  cuda::set_device(rank);
  Device device = Device::cuda(rank);
  auto store = client_store();
  ProcessGroupNccl group(*store, rank, world);
  manual_seed(77 + rank);  // different weights per rank: DDP broadcasts rank 0's
  Mlp model;
  model.to(kFloat64).to(device);
  DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.2, .first_bucket_cap_mb = 0.05});
  EXPECT_GE(ddp.bucket_layout().size(), 2u);  // 0.05 MB first bucket, then fc1 in a second
  Mlp reference;
  reference.to(kFloat64).to(device);
  reference.load_state_dict(model.state_dict());
  Tensor x = nabla::testing::random_input({8 * world, 32}, 5, kFloat64).to(device);
  Tensor y = nabla::testing::random_input({8 * world, 8}, 6, kFloat64).to(device);
  auto mse = [](const Tensor& a, const Tensor& b) { return ((a - b) * (a - b)).mean(); };
  for (int step = 0; step < 2; ++step) {
    model.zero_grad(step == 0);
    reference.zero_grad(step == 0);
    mse(ddp(x.slice(0, 8 * rank, 8 * rank + 8)), y.slice(0, 8 * rank, 8 * rank + 8)).backward();
    mse(reference(x), y).backward();
    auto a = model.named_parameters(), b = reference.named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(nabla::testing::all_close(a[i].second.grad(), b[i].second.grad(), 1e-10, 1e-12))
          << a[i].first;
    }
  }
}

// DDP over a one-rank NCCL group inside a CUDA-graph training step (Note [Collectives in a CUDA
// graph]): the bucket allreduces become nodes of the graph, and every replay gives the losses,
// gradients and weights of the same steps run eagerly on a plain copy of the model (one rank's
// average is its own gradient). In both launch modes, with two buckets.
TEST(CudaNccl, OneRankDdpInAGraphedStepEqualsTheEagerStep) {
  if (!has_gpus(1)) GTEST_SKIP() << "no CUDA device";
  for (const char* launch : {"when-ready", "eager"}) {
    LaunchMode mode(launch);
    const Device device = Device::cuda(cuda::current_device());
    TcpStore store("127.0.0.1", 0, {.is_server = true});
    ProcessGroupNccl group(store, 0, 1);
    manual_seed(nabla::testing::test_seed());
    Mlp model, reference;
    model.to(device);
    reference.to(device);
    reference.load_state_dict(model.state_dict());
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.2, .first_bucket_cap_mb = 0.05});
    EXPECT_GE(ddp.bucket_layout().size(), 2u);
    const optim::SgdOptions sgd{.lr = 0.05, .momentum = 0.9};
    optim::SGD opt(model.parameters(), sgd), reference_opt(reference.parameters(), sgd);
    auto mse = [](const Tensor& a, const Tensor& b) { return ((a - b) * (a - b)).mean(); };
    auto step = nn::make_graphed_step(
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss = mse(ddp(x), y);
          loss.backward();
          opt.step();
          return loss;
        },
        {.warmup = 2});
    constexpr int kSteps = 6;
    for (int s = 0; s < kSteps; ++s) {
      const uint64_t seed = nabla::testing::test_seed() + 10 * s;
      Tensor x = nabla::testing::random_input({16, 32}, seed, kFloat32).to(device);
      Tensor y = nabla::testing::random_input({16, 8}, seed + 1, kFloat32).to(device);
      reference_opt.zero_grad();
      Tensor want = mse(reference(x), y);
      want.backward();
      reference_opt.step();
      const double got = step(x, y).item<double>();
      EXPECT_NEAR(got, want.item<double>(), 1e-6 * std::abs(want.item<double>())) << launch << " step " << s;
    }
    EXPECT_TRUE(step.graphed()) << launch << ": " << step.eager_reason();
    EXPECT_EQ(step.replays(), kSteps - 2) << launch;
    auto a = model.named_parameters(), b = reference.named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(nabla::testing::all_close(a[i].second.grad(), b[i].second.grad(), 1e-5, 1e-7))
          << launch << " " << a[i].first << ".grad";
      EXPECT_TRUE(nabla::testing::all_close(a[i].second, b[i].second, 1e-5, 1e-7))
          << launch << " " << a[i].first;
    }
  }
}

TEST(CudaNccl, ADeadPeerAbortsWithAClearError) {
  if (!has_gpus(2)) GTEST_SKIP() << "needs two GPUs";
  auto codes = spawn_ranks(2, "NcclRank.DeadPeer", std::chrono::seconds(90));
  EXPECT_EQ(codes[0], 0) << "rank 0 should catch the error and exit cleanly";
  EXPECT_EQ(codes[1], 3) << "rank 1 exits on purpose";
}

TEST(NcclRank, DeadPeer) {
  if (spawned_rank() < 0)
    GTEST_SKIP() << "runs only as a rank started by CudaNccl.ADeadPeerAbortsWithAClearError";
  const int rank = spawned_rank();
  cuda::set_device(rank);
  auto store = client_store();
  ProcessGroupNccl group(*store, rank, 2, {.timeout = std::chrono::seconds(4)});
  Tensor t = full({1 << 20}, 1.0, {.dtype = kFloat32, .device = Device::cuda(rank)});
  group.allreduce(t)->wait();  // both alive: works
  cuda::synchronize();
  if (rank == 1) std::_Exit(3);  // dies without a word
  auto start = std::chrono::steady_clock::now();
  try {
    group.allreduce(t)->wait(std::chrono::seconds(60));
    FAIL() << "allreduce with a dead peer returned";
  } catch (const CollectiveError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("allreduce"), std::string::npos) << what;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
  // The group stays failed: later calls throw at once instead of hanging.
  EXPECT_THROW(group.allreduce(t), CollectiveError);
}

}  // namespace
}  // namespace nabla::distributed
