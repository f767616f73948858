// nabla-train data-parallel on the CPU (Gloo) under nabla-run and under Debian's torchrun, and an
// elastic restart: one of two ranks is killed halfway, the launcher starts both again
// (--max-restarts 1), `--resume auto` picks up the last complete checkpoint, and the run ends with
// the very weights of a run never cut.
#if defined(NABLA_TRAIN_GLOO) && defined(NABLA_RUN_PATH)
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <thread>

#include "free_ports.h"
#include "train_test_util.h"

namespace nabla::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The child of `parent` whose environment holds RANK=<rank>, or 0.
pid_t find_rank(pid_t parent, int rank) {
  const std::string wanted = fmt::format("RANK={}", rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so read after its ')'.
    const std::string stat = read_file((entry.path() / "stat").string());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent) continue;
    const std::string variables = read_file((entry.path() / "environ").string());
    std::istringstream vars(variables);
    for (std::string var; std::getline(vars, var, '\0');) {
      if (var == wanted) return static_cast<pid_t>(std::stoi(name));
    }
  }
  return 0;
}

class TrainElastic : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_fashion_mnist()) GTEST_SKIP() << "needs Debian's dataset-fashion-mnist";
    // 2,048 training images, batch 32 on each of 2 ranks: 32 steps per epoch.
    write_small_fashion_mnist(dir_.path() / "data", 2048, 64);
  }
  // 2 ranks of nabla-train under `launcher` ("nabla-run" or "torchrun") with `restarts`, as a
  // shell command line writing to <run>.log.
  std::string command(const std::string& launcher, const std::string& run, int restarts) const {
    // Debian's torchrun (PyTorch 1.13) takes underscored flags, and needs --redirects 1 --tee 1
    // under Python 3.12 (tests/distributed/torchrun_test.cpp).
    const std::string start =
        launcher == "torchrun" ? fmt::format(
                                     "/usr/bin/torchrun --redirects 1 --tee 1 --no_python --nproc_per_node 2 "
                                     "--master_port {} --max_restarts {}",
                                     free_port_pair(), restarts)
                               : fmt::format("{} --nproc-per-node 2 --master-port {} --max-restarts {} --",
                                             build_file(NABLA_RUN_PATH).string(), free_port_pair(), restarts);
    return fmt::format(
        "exec {} {} --data fashion-mnist:{} --device cpu --arch smallcnn --batch-size 32 --workers 1 "
        "--deterministic --progress off --seed 7 --epochs 10 --max-steps 120 --save-every 10 --resume auto "
        "--checkpoint-dir {} > {} 2>&1",
        start, train_binary(), (dir_.path() / "data").string(), dir_.file(run), dir_.file(run + ".log"));
  }
  void kill_a_rank_halfway(const std::string& launcher);
  TempDir dir_;
};

void TrainElastic::kill_a_rank_halfway(const std::string& launcher) {
  auto uncut = run_command(command(launcher, "uncut", 0));
  ASSERT_EQ(exit_code(uncut), 0) << read_file(dir_.file("uncut.log"));
  EXPECT_NE(read_file(dir_.file("uncut.log")).find("device cpu x 2 ranks"), std::string::npos)
      << read_file(dir_.file("uncut.log"));

  const std::string line = command(launcher, "cut", 1);
  const pid_t started = ::fork();
  if (started == 0) {
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Halfway: once the checkpoint of step 40 (of 120) is on disk, rank 1 dies without warning.
  const fs::path halfway = dir_.file("cut/checkpoint-000000040.safetensors");
  for (const auto until = Clock::now() + std::chrono::seconds(120);
       Clock::now() < until && !fs::exists(halfway);)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const pid_t rank1 = find_rank(started, 1);
  if (rank1 > 0) ::kill(rank1, SIGKILL);
  // The launcher's end, within a bound (it is killed, with its ranks, if it overruns).
  int status = -1;
  for (const auto until = Clock::now() + std::chrono::seconds(180); Clock::now() < until;) {
    if (::waitpid(started, &status, WNOHANG) == started) break;
    status = -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (status == -1) {
    ::kill(started, SIGKILL);
    ::waitpid(started, nullptr, 0);
  }
  const std::string log = read_file(dir_.file("cut.log"));
  ASSERT_GT(rank1, 0) << "rank 1 not found: " << log;
  ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  // (Which rank is named first depends on which exit the launcher reaps first: the killed rank 1,
  // or rank 0 failing in its next collective.)
  if (launcher == "nabla-run") {
    EXPECT_NE(log.find("restart 1 of 1 (rendezvous round 1) after: rank "), std::string::npos) << log;
  }
  // Restarted from a checkpoint of the cut run, not from the start (which would also end with the
  // same weights, the run being deterministic).
  std::smatch resumed;
  ASSERT_TRUE(std::regex_search(log, resumed, std::regex(R"(resumed from \S+: epoch \d+, step (\d+))")))
      << log;
  EXPECT_GE(std::stoi(resumed[1]), 40) << log;
  EXPECT_NE(log.find("done: 120 steps"), std::string::npos) << log;

  auto a = load_safetensors(dir_.file("uncut/checkpoint-000000120.safetensors"));
  auto b = load_safetensors(dir_.file("cut/checkpoint-000000120.safetensors"));
  expect_same_tensors(a, b, "model.");
  expect_same_tensors(a, b, "optimizer.");
  expect_same_tensors(a, b, "scheduler.");
}

TEST_F(TrainElastic, UnderNablaRunAKilledRankRestartsAndTheRunEndsWithTheWeightsOfAnUncutRun) {
  kill_a_rank_halfway("nabla-run");
}

TEST_F(TrainElastic, UnderTorchrunAKilledRankRestartsAndTheRunEndsWithTheWeightsOfAnUncutRun) {
  if (::access("/usr/bin/torchrun", X_OK) != 0) GTEST_SKIP() << "Debian's /usr/bin/torchrun is not installed";
  kill_a_rank_halfway("torchrun");
}

}  // namespace
}  // namespace nabla::testing
#endif  // NABLA_TRAIN_GLOO && NABLA_RUN_PATH
