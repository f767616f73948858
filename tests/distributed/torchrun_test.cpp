// Under Debian's torchrun (/usr/bin/torchrun): two ranks read torchrun's variables, find that
// its elastic agent's store holds MASTER_PORT (TORCHELASTIC_RUN_ID), meet on MASTER_PORT + 1
// through nabla's TcpStore, and all-reduce over Gloo. The test starts torchrun on its own binary,
// filtered to itself; inside torchrun (NABLA_TEST_TORCHRUN_RANK set) it is one rank.
#if defined(NABLA_HAS_GLOO)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "nabla/distributed/env.h"
#include "nabla/distributed/gloo/process_group_gloo.h"
#include "nabla/distributed/tcp_store.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

void run_one_rank() {
  const DistributedEnv env = distributed_env();
  ASSERT_EQ(env.source, "torchelastic");
  ASSERT_EQ(env.world_size, 2);
  ASSERT_EQ(env.master_port, std::atoi(std::getenv("MASTER_PORT")) + 1);
  auto store =
      TcpStore::from_env({.timeout = std::chrono::seconds(20), .connect_timeout = std::chrono::seconds(20)});
  ProcessGroupGloo group(*store, env.rank, env.world_size, {.timeout = std::chrono::seconds(20)});
  Tensor t = full({3}, env.rank + 1.0, {.dtype = kFloat64});
  group.allreduce(t, ReduceOp::sum)->wait();
  EXPECT_TRUE(nabla::testing::all_close(t, full({3}, 3.0, {.dtype = kFloat64}), 0.0, 0.0));
}

TEST(Torchrun, TwoRanksMeetBesideTheAgentsStore) {
  if (const char* rank_mode = std::getenv("NABLA_TEST_TORCHRUN_RANK");
      rank_mode != nullptr && *rank_mode != '\0') {
    run_one_rank();
    return;
  }
  if (::access("/usr/bin/torchrun", X_OK) != 0) GTEST_SKIP() << "Debian's /usr/bin/torchrun is not installed";
  // Below the ephemeral ports; the agent takes `port`, nabla's store port + 1.
  const int port = 21000 + (::getpid() % 4000) * 2;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // --redirects 1 --tee 1: Debian's torchrun (PyTorch 1.13) fails to parse its default "0" under
  // Python 3.12; these keep each rank's output on the console.
  const std::string command = fmt::format(
      "NABLA_TEST_TORCHRUN_RANK=1 /usr/bin/torchrun --redirects 1 --tee 1 --no_python --nproc_per_node 2 "
      "--master_port {} '{}' --gtest_filter=Torchrun.TwoRanksMeetBesideTheAgentsStore 2>&1",
      port, self);
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << output;
  size_t passed = 0;
  for (size_t at = output.find("[  PASSED  ] 1 test"); at != std::string::npos;
       at = output.find("[  PASSED  ] 1 test", at + 1))
    ++passed;
  EXPECT_EQ(passed, 2u) << "both ranks pass:\n" << output;
}

}  // namespace
}  // namespace nabla::distributed
#endif  // NABLA_HAS_GLOO
