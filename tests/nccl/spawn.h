// Runs one test of this binary as N ranks in N fresh processes (fork, then exec of this same
// binary with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set), the way a launcher
// starts a job. Exec, not a bare fork, because a process that has initialised CUDA cannot use it
// in a forked child.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "nabla/distributed/tcp_store.h"

namespace nabla::distributed::testing {

// This process's rank when it was started by spawn_ranks, or -1.
inline int spawned_rank() {
  const char* r = std::getenv("NABLA_TEST_RANK");
  return r ? std::atoi(r) : -1;
}
inline int spawned_world() {
  const char* w = std::getenv("WORLD_SIZE");
  return w ? std::atoi(w) : 1;
}

// Starts `world` copies of this binary running only `test` (Suite.Name) and returns their exit
// codes (-1: killed at the deadline). The store is hosted here, so MASTER_PORT is known.
inline std::vector<int> spawn_ranks(int world, const std::string& test,
                                    std::chrono::seconds deadline = std::chrono::seconds(120),
                                    const std::vector<std::pair<std::string, std::string>>& extra_env = {}) {
  TcpStore store("127.0.0.1", 0, {.is_server = true});
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("NABLA_TEST_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(store.port()).c_str(), 1);
      ::setenv("NCCL_NVLS_ENABLE", "0", 1);
      for (const auto& [k, v] : extra_env) ::setenv(k.c_str(), v.c_str(), 1);
      std::string filter = "--gtest_filter=" + test;
      ::execl(self.c_str(), self.c_str(), filter.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(world, -1);
  auto end = std::chrono::steady_clock::now() + deadline;
  int left = world;
  while (left > 0 && std::chrono::steady_clock::now() < end) {
    for (int rank = 0; rank < world; ++rank) {
      int status;
      if (pids[rank] != 0 && ::waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[rank] = 0;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (pid_t pid : pids) {
    if (pid != 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  return codes;
}

}  // namespace nabla::distributed::testing
