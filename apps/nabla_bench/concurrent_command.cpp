// `nabla-bench concurrent`: N inference processes sharing one GPU, each capped at its memory
// fraction (issue 9's question: do capped jobs coexist, and what do they get?).
//
//   nabla-bench concurrent --jobs 4 --memory-fraction 0.15 --iters 200
//
// Starts N copies of `nabla-bench infer` (this binary, through /proc/self/exe) at once, each
// with one batch size and amp setting, `--memory-fraction F` and its own JSON file and log, and
// waits for all of them (killing any still running after --timeout). Reports per job its exit
// status, throughput over its timed loop (img/s from wall time, since the jobs contend) and peak
// reserved memory, then the total img/s of the finished jobs and "K of N finished". Fractions
// that add up to more than 0.9 are allowed but warned about: each process also holds a CUDA
// context (a few hundred MB outside the cap), so the sum needs headroom.
#include <unistd.h>  // mkdtemp
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"
#include "nabla_bench/bench_common.h"
#include "nabla_bench/commands.h"
#include "nabla_bench/jobs.h"
#include "nabla_bench/table.h"

namespace nabla::bench {
namespace {

struct ConcurrentOptions {
  int jobs = 2;
  double memory_fraction = 0;  // 0: 0.9 / jobs
  std::string arch = "resnet50";
  int64_t batch_size = 64;
  std::string amp = "fp16";
  std::string layout = "channels-last";  // fp16 inference's fast layout
  int warmup = 10;
  int iters = 50;
  double seconds = 0;
  double timeout = 600;
  std::string log_dir;
  std::string json_path;
};

std::string make_log_dir(const std::string& wanted) {
  if (!wanted.empty()) {
    std::filesystem::create_directories(wanted);
    return wanted;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/nabla-concurrent-XXXXXX";
  NABLA_CHECK(::mkdtemp(pattern.data()) != nullptr, "concurrent: cannot create a log folder {}: {}", pattern,
              std::strerror(errno));
  return pattern;
}

void run_concurrent(const ConcurrentOptions& o) {
  parse_choices(o.amp, "--amp", amp_choices());  // one value each: checked here, not in N jobs
  parse_choices(o.layout, "--layout", layout_choices());
  NABLA_CHECK(o.amp.find(',') == std::string::npos && o.layout.find(',') == std::string::npos,
              "concurrent: --amp and --layout take one value each (every job runs the same configuration)");
  NABLA_CHECK(cuda::is_available(), "nabla-bench concurrent needs a CUDA device, and none was found");
  const double fraction = o.memory_fraction > 0 ? o.memory_fraction : 0.9 / o.jobs;
  if (fraction * o.jobs > 0.9 + 1e-9) {
    std::printf(
        "warning: %d jobs x memory fraction %g = %.2f of the GPU, over 0.9; the CUDA contexts need the "
        "rest, so some jobs may run out of memory\n",
        o.jobs, fraction, fraction * o.jobs);
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string dir = make_log_dir(o.log_dir);
  std::printf("starting %d jobs of %s infer, batch %lld, amp %s, %s, memory fraction %g each; logs in %s\n",
              o.jobs, o.arch.c_str(), static_cast<long long>(o.batch_size), o.amp.c_str(), o.layout.c_str(),
              fraction, dir.c_str());
  std::fflush(stdout);

  std::vector<JobSpec> jobs(static_cast<size_t>(o.jobs));
  std::vector<std::string> json_paths(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    json_paths[i] = fmt::format("{}/job{}.json", dir, i);
    std::filesystem::remove(json_paths[i]);  // a stale result must not count
    jobs[i].log_path = fmt::format("{}/job{}.log", dir, i);
    jobs[i].argv = {self,
                    "infer",
                    "--arch",
                    o.arch,
                    "--batch-sizes",
                    std::to_string(o.batch_size),
                    "--amp",
                    o.amp,
                    "--layout",
                    o.layout,
                    "--warmup",
                    std::to_string(o.warmup),
                    "--memory-fraction",
                    fmt::format("{}", fraction),
                    "--json",
                    json_paths[i]};
    if (o.seconds > 0) {
      jobs[i].argv.insert(jobs[i].argv.end(), {"--seconds", fmt::format("{}", o.seconds)});
    } else {
      jobs[i].argv.insert(jobs[i].argv.end(), {"--iters", std::to_string(o.iters)});
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_jobs_together(jobs, o.timeout);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  Table table({"job", "status", "img/s", "median ms", "peak reserved GiB", "note"});
  std::vector<nlohmann::json> rows;
  int done = 0;
  double total = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto& job = results[i];
    nlohmann::json row = {{"bench", "concurrent"},
                          {"job", i},
                          {"jobs", o.jobs},
                          {"memory_fraction", fraction},
                          {"status", describe_exit(job)},
                          {"finished", finished(job)},
                          {"log", jobs[i].log_path}};
    std::ifstream in(json_paths[i]);
    auto result = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (finished(job) && result.is_array() && !result.empty()) {
      row["result"] = result[0];
      ++done;
      total += number_at(result[0], "img_s_wall").value_or(0);
    }
    const nlohmann::json& r = row.contains("result") ? row["result"] : row;
    table.add_row({std::to_string(i), row["status"].get<std::string>(),
                   format_number(number_at(r, "img_s_wall"), 1), format_number(number_at(r, "median_ms"), 3),
                   format_number(number_at(r, "peak_reserved_GiB"), 2),
                   finished(job) ? "" : last_line(jobs[i].log_path).substr(0, 160)});
    rows.push_back(std::move(row));
  }
  std::printf("\n%d concurrent %s infer jobs (batch %lld, amp %s, %s, memory fraction %g each), %.1f s\n%s",
              o.jobs, o.arch.c_str(), static_cast<long long>(o.batch_size), o.amp.c_str(), o.layout.c_str(),
              fraction, wall, table.render().c_str());
  std::printf("total %.1f img/s; %d of %d finished\n", total, done, o.jobs);
  rows.push_back({{"bench", "concurrent"},
                  {"summary", true},
                  {"jobs", o.jobs},
                  {"finished", done},
                  {"memory_fraction", fraction},
                  {"img_s_total", total},
                  {"seconds", wall}});
  write_json_rows(o.json_path, rows);
  NABLA_CHECK(done == o.jobs, "concurrent: {} of {} jobs did not finish (see the note column and {})",
              o.jobs - done, o.jobs, dir);
}

}  // namespace

void add_concurrent_command(CLI::App& app) {
  auto o = std::make_shared<ConcurrentOptions>();
  auto* cmd =
      app.add_subcommand("concurrent",
                         "N inference processes on one GPU, each capped at a memory fraction: how many "
                         "finish, and their throughput");
  cmd->add_option("--jobs", o->jobs, "Processes to start at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--memory-fraction", o->memory_fraction, "Each job's cap (0: 0.9 / jobs)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--arch", o->arch,
                  "resnet18|34|50|101|152, or "
                  "mobilenet_v2|mobilenet_v3_large|mobilenet_v3_small|efficientnet_b0|vit_b_16")
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--amp", o->amp, "off, fp16 or bf16 (autocast)")->capture_default_str();
  cmd->add_option("--layout", o->layout, "nchw or channels-last")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed forwards per job")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--iters", o->iters, "Timed forwards per job")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seconds", o->seconds, "Time forwards for this long per job instead of --iters")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--timeout", o->timeout, "Kill jobs still running after this many seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--log-dir", o->log_dir,
                  "Folder for each job's log and JSON (default: a new folder in /tmp)");
  cmd->add_option("--json", o->json_path, "Also write the per-job rows and a summary row as a JSON list");
  cmd->callback([o] { run_concurrent(*o); });
}

}  // namespace nabla::bench
