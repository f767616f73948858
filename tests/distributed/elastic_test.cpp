// nabla-run across nodes, on 127.0.0.1: two launcher processes (--nnodes 2, --node-rank 0 and 1)
// with two ranks each form one 4-rank Gloo group; a failure on one node restarts every node in a
// new rendezvous round; a node that dies is named by the other within the timeouts. The ranks are
// this test binary again, filtered to the test that started them (NABLA_TEST_ELASTIC_RANK set).
#if defined(NABLA_RUN_PATH) && defined(NABLA_HAS_GLOO)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "free_ports.h"
#include "nabla/distributed/env.h"
#include "nabla/distributed/gloo/process_group_gloo.h"
#include "nabla/distributed/tcp_store.h"
#include "test_paths.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* rank_mode() {
  const char* mode = std::getenv("NABLA_TEST_ELASTIC_RANK");
  return mode != nullptr && *mode != '\0' ? mode : nullptr;
}

// One rank: meets the others through the store on MASTER_PORT + 1 and all-reduces rank + 1 over
// Gloo. "fail-once": then rank 3 exits with code 3 in round 0. "collectives": then it touches
// $NABLA_TEST_ELASTIC_DIR/up.<rank> and keeps all-reducing until it fails or is killed; "idle":
// it touches the file and sleeps, so only the launchers can notice a lost node.
void run_rank(const std::string& mode) {
  const DistributedEnv env = distributed_env();
  ASSERT_EQ(env.source, "nabla-run");
  ASSERT_EQ(env.world_size, 4);
  ASSERT_EQ(env.local_world_size, 2);
  ASSERT_EQ(env.master_port, std::atoi(std::getenv("MASTER_PORT")) + 1);
  const int round = std::atoi(std::getenv("TORCHELASTIC_RESTART_COUNT"));
  auto store =
      TcpStore::from_env({.timeout = std::chrono::seconds(30), .connect_timeout = std::chrono::seconds(30)});
  ProcessGroupGloo group(*store, env.rank, env.world_size, {.timeout = std::chrono::seconds(30)});
  Tensor t = full({3}, env.rank + 1.0, {.dtype = kFloat64});
  group.allreduce(t, ReduceOp::sum)->wait();
  ASSERT_TRUE(nabla::testing::all_close(t, full({3}, 10.0, {.dtype = kFloat64}), 0.0, 0.0));
  std::printf("rank %d of round %d all-reduced\n", env.rank, round);
  std::fflush(stdout);
  if (mode == "fail-once") {
    // Rank 3 leaves last but for rank 0, once every rank has read the whole all-reduce (a rank
    // exiting with a peer's data unread resets that peer's sockets, and the peer fails first,
    // with another cause); in round 0 it fails. Rank 0 holds the store, so it waits for rank 3.
    const std::string tag = fmt::format("round{}.", round);
    if (store->add(tag + "done", 1) == 4) store->set(tag + "all_done", "1");
    store->wait({tag + "all_done"});
    if (env.rank != 3 && store->add(tag + "left", 1) == 3) store->set(tag + "all_left", "1");
    if (env.rank == 3) {
      store->wait({tag + "all_left"});
      store->set(tag + "rank3_left", "1");
      if (round == 0) ::_exit(3);
    }
    if (env.rank == 0) store->wait({tag + "rank3_left"});
  }
  if (mode == "collectives" || mode == "idle") {
    std::ofstream(fs::path(std::getenv("NABLA_TEST_ELASTIC_DIR")) / fmt::format("up.{}", env.rank)) << "up";
    for (const auto until = Clock::now() + std::chrono::seconds(120); Clock::now() < until;) {
      if (mode == "collectives") group.allreduce(t, ReduceOp::sum)->wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

// One node's nabla-run, running this binary filtered to `test` as its ranks; output to `log`.
pid_t start_node(int node, int port, const std::string& test, const std::string& mode, const fs::path& dir,
                 const std::string& flags) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string command = fmt::format(
      "NABLA_TEST_ELASTIC_RANK={} NABLA_TEST_ELASTIC_DIR='{}' exec '{}' --nnodes 2 --node-rank {} "
      "--nproc-per-node 2 --master-addr 127.0.0.1 --master-port {} {} -- '{}' --gtest_filter=Elastic.{} "
      "> '{}' 2>&1",
      mode, dir.string(), nabla::testing::build_file(NABLA_RUN_PATH).string(), node, port, flags, self, test,
      (dir / fmt::format("node{}.log", node)).string());
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no launcher outlives a test that dies
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The launcher's exit code, or -1 if it was still running after `limit` (it is then killed).
int wait_for(pid_t pid, std::chrono::seconds limit) {
  for (const auto until = Clock::now() + limit; Clock::now() < until;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

std::string read_log(const fs::path& dir, int node) {
  std::ifstream in(dir / fmt::format("node{}.log", node));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Both nodes of a job, started alike.
struct Nodes {
  pid_t node0 = 0, node1 = 0;
};

// Both nodes' nabla-run on a fresh port pair, running the current test as their ranks.
Nodes start_nodes(const std::string& mode, const fs::path& dir, const std::string& flags) {
  const int port = nabla::testing::free_port_pair();
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return {start_node(0, port, test, mode, dir, flags), start_node(1, port, test, mode, dir, flags)};
}

class Elastic : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("nabla_elastic_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(Elastic, TwoLaunchersFormOneFourRankGlooGroup) {
  if (const char* mode = rank_mode()) return run_rank(mode);
  // Node 1 first: it waits for node 0's store to come up.
  const int port = nabla::testing::free_port_pair();
  const pid_t node1 = start_node(1, port, "TwoLaunchersFormOneFourRankGlooGroup", "allreduce", dir_, "");
  const pid_t node0 = start_node(0, port, "TwoLaunchersFormOneFourRankGlooGroup", "allreduce", dir_, "");
  EXPECT_EQ(wait_for(node0, std::chrono::seconds(60)), 0) << read_log(dir_, 0);
  EXPECT_EQ(wait_for(node1, std::chrono::seconds(60)), 0) << read_log(dir_, 1);
  const std::string log0 = read_log(dir_, 0), log1 = read_log(dir_, 1);
  // Node 0 runs global ranks 0 and 1, node 1 runs 2 and 3; each rank passes.
  for (int rank = 0; rank < 4; ++rank) {
    const std::string& log = rank < 2 ? log0 : log1;
    EXPECT_NE(log.find(fmt::format("[rank {}] rank {} of round 0 all-reduced", rank, rank)),
              std::string::npos)
        << log;
  }
  EXPECT_EQ(count(log0, "[  PASSED  ] 1 test"), 2u) << log0;
  EXPECT_EQ(count(log1, "[  PASSED  ] 1 test"), 2u) << log1;
}

TEST_F(Elastic, AFailureOnOneNodeRestartsEveryNodeInANewRound) {
  if (const char* mode = rank_mode()) return run_rank(mode);
  const auto [node0, node1] = start_nodes("fail-once", dir_, "--max-restarts 1 --monitor-interval 1");
  EXPECT_EQ(wait_for(node0, std::chrono::seconds(90)), 0) << read_log(dir_, 0);
  EXPECT_EQ(wait_for(node1, std::chrono::seconds(90)), 0) << read_log(dir_, 1);
  const std::string log0 = read_log(dir_, 0), log1 = read_log(dir_, 1);
  // Rank 3 (node 1) failed in round 0; node 0, whose ranks had finished, restarted too.
  EXPECT_NE(log1.find("rank 3 (local rank 1, pid"), std::string::npos) << log1;
  EXPECT_NE(
      log0.find(
          "restart 1 of 1 (rendezvous round 1) after: rank 3 (node 1, local rank 1) exited with code 3"),
      std::string::npos)
      << log0;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string& log = rank < 2 ? log0 : log1;
    EXPECT_NE(log.find(fmt::format("rank {} of round 1 all-reduced", rank)), std::string::npos) << log;
  }
}

// Waits (up to a minute) until the 4 ranks of an "idle" or "collectives" job have all-reduced.
void wait_until_every_rank_is_up(const fs::path& dir) {
  for (const auto until = Clock::now() + std::chrono::seconds(60); Clock::now() < until;) {
    bool up = true;
    for (int rank = 0; rank < 4; ++rank) up = up && fs::exists(dir / fmt::format("up.{}", rank));
    if (up) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Kills node 1's nabla-run (its ranks die with it) once every rank is up in `mode`; returns
// node 0's exit code, its log, and how long it took to exit after the kill.
struct DeadNode {
  int code = 0;
  std::string log;
  Clock::duration took{};
};

DeadNode kill_node1(const fs::path& dir, const std::string& mode, const std::string& flags) {
  const auto [node0, node1] = start_nodes(mode, dir, flags);
  wait_until_every_rank_is_up(dir);
  ::kill(node1, SIGKILL);
  ::waitpid(node1, nullptr, 0);
  const auto killed = Clock::now();
  DeadNode r;
  r.code = wait_for(node0, std::chrono::seconds(60));
  r.took = Clock::now() - killed;
  r.log = read_log(dir, 0);
  return r;
}

TEST_F(Elastic, ADeadNodeIsNamedAfterTheRestartWaitsForItInVain) {
  if (const char* mode = rank_mode()) return run_rank(mode);
  const DeadNode r =
      kill_node1(dir_, "collectives", "--max-restarts 2 --monitor-interval 1 --rdzv-timeout 4 --grace 2");
  EXPECT_NE(r.code, 0) << r.log;
  // Node 0's ranks lose their peers, the round fails, and node 1 never joins the next one.
  EXPECT_NE(r.log.find("node(s) 1 did not join rendezvous round 1 within --rdzv-timeout 4 s"),
            std::string::npos)
      << r.log;
  EXPECT_LT(r.took, std::chrono::seconds(30)) << r.log;
}

TEST_F(Elastic, ADeadNodeIsNamedByItsMissingHeartbeat) {
  if (const char* mode = rank_mode()) return run_rank(mode);
  // Ranks that do not talk to each other cannot notice; node 0's watch of the heartbeats does,
  // within 3 monitor intervals, and stops its ranks.
  const DeadNode r = kill_node1(dir_, "idle", "--monitor-interval 1 --grace 2");
  EXPECT_EQ(r.code, 1) << r.log;
  EXPECT_NE(r.log.find("node 1 has sent no heartbeat"), std::string::npos) << r.log;
  EXPECT_LT(r.took, std::chrono::seconds(15)) << r.log;
}

TEST_F(Elastic, ANodeThatLosesNode0StopsAndSaysSo) {
  if (const char* mode = rank_mode()) return run_rank(mode);
  const auto [node0, node1] = start_nodes("idle", dir_, "--monitor-interval 1 --grace 2");
  wait_until_every_rank_is_up(dir_);
  ::kill(node0, SIGKILL);
  ::waitpid(node0, nullptr, 0);
  EXPECT_NE(wait_for(node1, std::chrono::seconds(60)), 0);
  const std::string log1 = read_log(dir_, 1);
  EXPECT_NE(log1.find("node 0 is gone: lost the launchers' store"), std::string::npos) << log1;
}

TEST_F(Elastic, ACtrlCOnOneNodeStopsEveryNodeWithoutARestart) {
  if (const char* mode = rank_mode()) return run_rank(mode);
  const auto [node0, node1] = start_nodes("idle", dir_, "--max-restarts 2 --monitor-interval 1 --grace 2");
  wait_until_every_rank_is_up(dir_);
  ::kill(node1, SIGINT);
  EXPECT_EQ(wait_for(node1, std::chrono::seconds(30)), 128 + SIGINT) << read_log(dir_, 1);
  EXPECT_NE(wait_for(node0, std::chrono::seconds(30)), 0) << read_log(dir_, 0);
  const std::string log0 = read_log(dir_, 0);
  EXPECT_NE(log0.find("nabla-run on node 1 got Interrupt"), std::string::npos) << log0;
  // No rank of a second round ran (node 0 may have begun one, if it counted its own ranks'
  // failure before it read the stop; the stop then ends it at the rendezvous).
  EXPECT_EQ(log0.find("of round 1 all-reduced"), std::string::npos) << log0;
}

TEST_F(Elastic, NodesStartedWithOtherSettingsAreRefused) {
  if (const char* mode = rank_mode()) return run_rank(mode);
  const int port = nabla::testing::free_port_pair();
  const std::string test = "NodesStartedWithOtherSettingsAreRefused";
  const pid_t node0 = start_node(0, port, test, "allreduce", dir_, "--max-restarts 1 --rdzv-timeout 20");
  const pid_t node1 = start_node(1, port, test, "allreduce", dir_, "--max-restarts 2 --rdzv-timeout 20");
  EXPECT_EQ(wait_for(node1, std::chrono::seconds(30)), 1) << read_log(dir_, 1);
  EXPECT_NE(read_log(dir_, 1).find("node 1 runs with --nproc-per-node 2 --max-restarts 2, but node 0 with "
                                   "--nproc-per-node 2 --max-restarts 1"),
            std::string::npos)
      << read_log(dir_, 1);
  // Node 0 learns it from the store at once, without waiting out its --rdzv-timeout.
  const auto start = Clock::now();
  EXPECT_EQ(wait_for(node0, std::chrono::seconds(30)), 1) << read_log(dir_, 0);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << read_log(dir_, 0);
  EXPECT_NE(read_log(dir_, 0).find("the job was stopped"), std::string::npos) << read_log(dir_, 0);
}

}  // namespace
}  // namespace nabla::distributed
#endif  // NABLA_RUN_PATH && NABLA_HAS_GLOO
