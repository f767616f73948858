// nabla-bench concurrent's process handling (apps/nabla_bench/jobs.h), on plain shell jobs:
// all start before any is waited for, exit statuses and signals are told apart, a job past the
// timeout is killed, and a program that cannot start is an error naming it.
#include <gtest/gtest.h>

#include <chrono>

#include "apps_test_util.h"
#include "nabla_bench/jobs.h"
#include "test_util.h"

namespace nabla::bench {
namespace {

using nabla::testing::read_file;
using nabla::testing::TempDir;
using nabla::testing::write_file;

JobSpec shell_job(const std::string& script, const std::string& log) {
  return {.argv = {"/bin/sh", "-c", script}, .log_path = log};
}

TEST(BenchJobs, JobsRunTogetherAndReportTheirExits) {
  TempDir dir;
  const std::string a = dir.file("a"), b = dir.file("b");
  // Each of the first two waits for the other's file: run one after the other, they would both
  // hit the timeout instead of finishing.
  const std::string wait_for = "i=0; while [ ! -f {} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; ";
  std::vector<JobSpec> jobs = {
      shell_job("touch " + a + "; " + fmt::format(fmt::runtime(wait_for), b) + "echo first done; exit 0",
                dir.file("0.log")),
      shell_job("touch " + b + "; " + fmt::format(fmt::runtime(wait_for), a) +
                    "echo 'nabla-bench: out of memory under --memory-fraction 0.15' >&2; exit 3",
                dir.file("1.log")),
      shell_job("kill -9 $$", dir.file("2.log"))};
  const auto results = run_jobs_together(jobs, 15);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(describe_exit(results[0]), "ok");
  EXPECT_TRUE(finished(results[0]));
  EXPECT_EQ(describe_exit(results[1]), "exit 3");
  EXPECT_FALSE(finished(results[1]));
  EXPECT_EQ(describe_exit(results[2]), "signal 9");
  EXPECT_FALSE(finished(results[2]));
  // Each job's stdout and stderr went to its own log.
  EXPECT_EQ(read_file(dir.file("0.log")), "first done\n");
  EXPECT_EQ(last_line(dir.file("1.log")), "nabla-bench: out of memory under --memory-fraction 0.15");
}

TEST(BenchJobs, JobPastTheTimeoutIsKilled) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_jobs_together(
      {shell_job("exec sleep 60", dir.file("0.log")), shell_job("exit 0", dir.file("1.log"))}, 0.5);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30);  // not the 60 s of the sleep
  EXPECT_TRUE(results[0].timed_out);
  EXPECT_EQ(describe_exit(results[0]), "timed out");
  EXPECT_FALSE(finished(results[0]));
  EXPECT_TRUE(finished(results[1]));
}

TEST(BenchJobs, ProgramThatCannotStartIsAnErrorNamingIt) {
  TempDir dir;
  EXPECT_NABLA_ERROR(
      run_jobs_together({shell_job("exec sleep 60", dir.file("0.log")),
                         {.argv = {"/nonexistent/nabla-bench"}, .log_path = dir.file("1.log")}},
                        30),
      "cannot start /nonexistent/nabla-bench");
}

TEST(BenchJobs, LastLineSkipsTrailingBlankLines) {
  TempDir dir;
  write_file(dir.file("log"), "starting\nnabla-bench: boom\n\n\n");
  EXPECT_EQ(last_line(dir.file("log")), "nabla-bench: boom");
  EXPECT_EQ(last_line(dir.file("missing")), "");
}

}  // namespace
}  // namespace nabla::bench
