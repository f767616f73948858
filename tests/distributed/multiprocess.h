// Runs a function as N ranks in N forked processes that meet through a TcpStore, the way a
// launcher runs a job, and reports each rank's outcome. A rank fails by throwing; its message
// comes back to the test. Children leave with _exit, so no parent state is torn down twice.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nabla/distributed/tcp_store.h"

namespace nabla::distributed::testing {

struct RankResult {
  int exit_code = -1;   // -1: killed after the deadline
  std::string message;  // what the rank wrote to its error pipe
};

using RankFn = std::function<void(int rank, int world, Store& store)>;

inline std::vector<RankResult> run_ranks(int world, const RankFn& fn,
                                         std::chrono::seconds deadline = std::chrono::seconds(60)) {
  TcpStore server("127.0.0.1", 0, {.is_server = true, .timeout = std::chrono::seconds(30)});
  std::vector<pid_t> pids(world);
  std::vector<int> pipes(world);
  for (int rank = 0; rank < world; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      int code = 0;
      std::string message;
      try {
        TcpStore store("127.0.0.1", server.port(), {.timeout = std::chrono::seconds(30)});
        fn(rank, world, store);
      } catch (const std::exception& e) {
        message = e.what();
        code = 1;
      }
      if (!message.empty()) (void)!::write(fds[1], message.data(), message.size());
      ::_exit(code);
    }
    ::close(fds[1]);
    pids[rank] = pid;
    pipes[rank] = fds[0];
  }
  std::vector<RankResult> results(world);
  auto end = std::chrono::steady_clock::now() + deadline;
  int left = world;
  while (left > 0) {
    for (int rank = 0; rank < world; ++rank) {
      if (pids[rank] == 0) continue;
      int status = 0;
      if (::waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        results[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[rank] = 0;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > end) {
      for (int rank = 0; rank < world; ++rank) {
        if (pids[rank] != 0) {
          ::kill(pids[rank], SIGKILL);
          ::waitpid(pids[rank], nullptr, 0);
          pids[rank] = 0;
          results[rank].message = "killed: still running at the test's deadline";
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int rank = 0; rank < world; ++rank) {
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(pipes[rank], buffer, sizeof(buffer))) > 0) results[rank].message.append(buffer, n);
    ::close(pipes[rank]);
  }
  return results;
}

// Expects every rank to have exited 0, printing the failures' messages otherwise.
inline void expect_all_succeeded(const std::vector<RankResult>& results) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    EXPECT_EQ(results[rank].exit_code, 0) << "rank " << rank << ": " << results[rank].message;
  }
}

// Throws (failing the rank) when `cond` is false.
#define RANK_CHECK(cond, ...)                                                                              \
  do {                                                                                                     \
    if (!(cond))                                                                                           \
      throw std::runtime_error(std::string("check failed: ") + #cond + " " + fmt::format("" __VA_ARGS__)); \
  } while (0)

}  // namespace nabla::distributed::testing
