// nabla-run, the real binary, on one node: the environment each rank gets, the failure report and
// the stop of the other ranks, and signal forwarding (several nodes and restarts: elastic_test.cpp).
#if defined(NABLA_RUN_PATH)

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "free_ports.h"
#include "test_paths.h"

namespace {

struct Result {
  int code = -1;
  std::string output;
};

// Runs a shell command line and captures its stdout and stderr together.
Result run(const std::string& command) {
  Result r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// nabla-run on a free port pair of its own (free_ports.h).
std::string launcher() {
  return nabla::testing::build_file(NABLA_RUN_PATH).string() + " --master-port " +
         std::to_string(nabla::testing::free_port_pair());
}

const std::string kRun = nabla::testing::build_file(NABLA_RUN_PATH).string();

TEST(Launcher, EveryRankGetsTheTorchrunEnvironment) {
  const int port = nabla::testing::free_port_pair();
  auto r =
      run(kRun + " --nproc-per-node 3 --master-addr 127.0.0.1 --master-port " + std::to_string(port) +
          " -- sh -c 'echo env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
          "$TORCHELASTIC_RESTART_COUNT $NABLA_RUN'");
  EXPECT_EQ(r.code, 0) << r.output;
  // (Several nodes: tests/distributed/elastic_test.cpp.)
  for (int local = 0; local < 3; ++local) {
    std::string line = "[rank " + std::to_string(local) + "] env " + std::to_string(local) + " 3 " +
                       std::to_string(local) + " 3 127.0.0.1 " + std::to_string(port) + " 0 1";
    EXPECT_NE(r.output.find(line), std::string::npos) << "missing '" << line << "' in:\n" << r.output;
  }
}

TEST(Launcher, AFailingRankStopsTheOthersAndIsReported) {
  auto start = std::chrono::steady_clock::now();
  auto r =
      run(launcher() +
          " --nproc-per-node 3 --grace 2 -- sh -c "
          "'if [ $RANK = 1 ]; then echo \"CUDA error: out of memory at step 7\" >&2; exit 5; fi; sleep 60'");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.code, 5) << r.output;
  EXPECT_NE(r.output.find("rank 1 (local rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("out of memory at step 7"), std::string::npos) << r.output;
  EXPECT_LT(took, std::chrono::seconds(20)) << "the sleeping ranks were not stopped";
}

TEST(Launcher, ARankThatIgnoresSigtermIsKilledAfterTheGrace) {
  auto start = std::chrono::steady_clock::now();
  auto r = run(launcher() +
               " --nproc-per-node 2 --grace 1 -- sh -c "
               "'trap \"\" TERM; if [ $RANK = 0 ]; then exit 3; fi; sleep 60'");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << r.output;
}

TEST(Launcher, SigtermIsForwardedToEveryRank) {
  auto dir = std::filesystem::temp_directory_path() / ("nabla_run_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string script = "trap 'echo got > " + dir.string() +
                         "/term.$RANK; exit 0' TERM; "
                         "touch " +
                         dir.string() + "/up.$RANK; while true; do sleep 0.05; done";
    const std::string port = std::to_string(nabla::testing::free_port_pair());
    ::execl(kRun.c_str(), kRun.c_str(), "--master-port", port.c_str(), "--nproc-per-node", "2", "--", "sh",
            "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until both ranks run, then stop the launcher as a scheduler would.
  for (int i = 0;
       i < 200 && !(std::filesystem::exists(dir / "up.0") && std::filesystem::exists(dir / "up.1")); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(std::filesystem::exists(dir / "term.0"));
  EXPECT_TRUE(std::filesystem::exists(dir / "term.1"));
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  std::filesystem::remove_all(dir);
}

TEST(Launcher, BadArgumentsAreClearErrors) {
  auto r = run(kRun + " --nproc-per-node 0 -- true");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("nproc-per-node"), std::string::npos) << r.output;
  r = run(kRun + " --max-restarts -1 -- true");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("max-restarts"), std::string::npos) << r.output;
  r = run(kRun + " --monitor-interval 0 -- true");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("monitor-interval"), std::string::npos) << r.output;
  r = run(launcher() + " --nproc-per-node 1 -- /nonexistent/program");
  EXPECT_EQ(r.code, 127) << r.output;
  EXPECT_NE(r.output.find("cannot execute '/nonexistent/program'"), std::string::npos) << r.output;
}

TEST(Launcher, APortInUseIsAClearError) {
  // Another process listens on the port nabla-run's store wants.
  const int port = nabla::testing::free_port_pair();
  int fd = -1;
  ASSERT_EQ(nabla::testing::detail::bind_port(port, fd), port);
  ASSERT_EQ(::listen(fd, 1), 0);
  auto r = run(kRun + " --master-port " + std::to_string(port) + " -- true");
  ::close(fd);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(
      r.output.find("node 0 cannot start the launchers' store on --master-port " + std::to_string(port)),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("already in use"), std::string::npos) << r.output;
}

}  // namespace

#endif  // NABLA_RUN_PATH
