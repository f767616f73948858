#include "nabla_bench/jobs.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "nabla/core/error.h"

extern char** environ;

namespace nabla::bench {
namespace {

pid_t spawn_job(const JobSpec& job) {
  NABLA_CHECK(!job.argv.empty(), "run_jobs_together: a job needs a program");
  std::vector<char*> argv;
  for (const auto& a : job.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Each job writes to its own log, so N jobs' output does not interleave on the terminal.
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, job.log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, job.argv[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  NABLA_CHECK(error == 0, "cannot start {} (log {}): {}", job.argv[0], job.log_path, std::strerror(error));
  return pid;
}

}  // namespace

std::vector<JobResult> run_jobs_together(const std::vector<JobSpec>& jobs, double timeout_s) {
  std::vector<pid_t> pids;
  pids.reserve(jobs.size());
  for (const auto& job : jobs) {
    try {
      pids.push_back(spawn_job(job));
    } catch (const Error&) {
      for (pid_t pid : pids) {  // leave no job behind
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      throw;
    }
  }
  std::vector<JobResult> results(jobs.size());
  std::vector<bool> done(jobs.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  size_t running = jobs.size();
  while (running > 0) {
    const bool late = std::chrono::steady_clock::now() > deadline;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (done[i]) continue;
      if (::waitpid(pids[i], &results[i].status, WNOHANG) == pids[i]) {
        done[i] = true;
        --running;
      } else if (late) {
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], &results[i].status, 0);
        results[i].timed_out = true;
        done[i] = true;
        --running;
      }
    }
    // Polling (not a blocking wait) so the deadline holds for every job.
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return results;
}

std::string describe_exit(const JobResult& result) {
  if (result.timed_out) return "timed out";
  if (WIFEXITED(result.status))
    return WEXITSTATUS(result.status) == 0 ? "ok" : "exit " + std::to_string(WEXITSTATUS(result.status));
  if (WIFSIGNALED(result.status)) return "signal " + std::to_string(WTERMSIG(result.status));
  return "unknown";
}

bool finished(const JobResult& result) {
  return !result.timed_out && WIFEXITED(result.status) && WEXITSTATUS(result.status) == 0;
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace nabla::bench
