// Starting several processes at once and waiting for all of them, for `nabla-bench concurrent`.
// Kept apart from the GPU code so the CPU tests run it on plain shell commands
// (tests/apps/bench_jobs_test.cpp).
#pragma once

#include <string>
#include <vector>

namespace nabla::bench {

struct JobSpec {
  std::vector<std::string> argv;  // argv[0] is the program's path (not searched in PATH)
  std::string log_path;           // the job's stdout and stderr
};

struct JobResult {
  int status = 0;  // as waitpid reports it
  bool timed_out = false;
};

// Starts every job before waiting for any (so they run together), then waits for all; jobs
// still running after `timeout_s` seconds are killed (SIGKILL) and marked timed out. If a job
// cannot be started, the ones already started are killed and an Error names the program.
std::vector<JobResult> run_jobs_together(const std::vector<JobSpec>& jobs, double timeout_s);

// "ok", "exit 3", "signal 9" or "timed out".
std::string describe_exit(const JobResult& result);
// Exited by itself with status 0.
bool finished(const JobResult& result);
// The last non-empty line of a file ("" when there is none): a failed job's error message.
std::string last_line(const std::string& path);

}  // namespace nabla::bench
