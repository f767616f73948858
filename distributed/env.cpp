#include "nabla/distributed/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>

#include "nabla/core/error.h"

namespace nabla::distributed {
namespace {

bool has(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

int read_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(v, &end, 10);
  NABLA_CHECK(*end == '\0' && parsed >= lo && parsed <= hi,
              "environment variable {}='{}' must be an integer in [{}, {}]", name, v, lo, hi);
  return static_cast<int>(parsed);
}

// The first of `names` that is set, and its value; {nullptr, ""} when none is.
std::pair<const char*, std::string> first_set(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return {name, value};
  }
  return {nullptr, ""};
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

// Expands one entry of a host list (no top-level commas), bracket group by bracket group.
void expand_entry(const std::string& list, const std::string& entry, const std::string& prefix,
                  std::vector<std::string>& out) {
  const size_t open = entry.find('[');
  if (open == std::string::npos) {
    NABLA_CHECK(entry.find(']') == std::string::npos, "Slurm host list '{}': a ']' without its '['", list);
    out.push_back(prefix + entry);
    return;
  }
  const size_t close = entry.find(']', open);
  NABLA_CHECK(close != std::string::npos, "Slurm host list '{}': a '[' without its ']'", list);
  const std::string head = prefix + entry.substr(0, open);
  const std::string ranges = entry.substr(open + 1, close - open - 1);
  const std::string rest = entry.substr(close + 1);
  NABLA_CHECK(!ranges.empty() && ranges.find('[') == std::string::npos,
              "Slurm host list '{}': expected numbers or ranges like 01-04 inside [ ]", list);
  size_t start = 0;
  while (start <= ranges.size()) {
    const size_t comma = std::min(ranges.find(',', start), ranges.size());
    const std::string range = ranges.substr(start, comma - start);
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash),
                      hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    NABLA_CHECK(all_digits(lo) && all_digits(hi) && lo.size() <= 9 && hi.size() <= 9,
                "Slurm host list '{}': '{}' is not a number or a range like 01-04", list, range);
    const long first = std::stol(lo), last = std::stol(hi);
    NABLA_CHECK(first <= last && last - first < 100000,
                "Slurm host list '{}': the range '{}' is empty or too long", list, range);
    for (long n = first; n <= last; ++n)
      expand_entry(list, rest, fmt::format("{}{:0{}}", head, n, lo.size()), out);
    start = comma + 1;
  }
}

}  // namespace

std::vector<std::string> parse_slurm_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    NABLA_CHECK(depth == 0 || depth == 1, "Slurm host list '{}': brackets do not nest or balance", list);
    if (c != ',' || depth != 0) continue;
    const std::string entry = list.substr(start, i - start);
    NABLA_CHECK(!entry.empty(), "Slurm host list '{}': an empty host name", list);
    expand_entry(list, entry, "", hosts);
    start = i + 1;
  }
  NABLA_CHECK(depth == 0, "Slurm host list '{}': a '[' without its ']'", list);
  return hosts;
}

std::vector<int> parse_slurm_tasks_per_node(const std::string& spec) {
  std::vector<int> tasks;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string part = spec.substr(start, comma - start);
    const size_t paren = part.find("(x");
    const std::string count = part.substr(0, paren);
    const std::string times = paren == std::string::npos ? "1" : part.substr(paren + 2);
    NABLA_CHECK(all_digits(count) && count.size() <= 6 &&
                    (paren == std::string::npos ||
                     (times.size() >= 2 && times.back() == ')' &&
                      all_digits(times.substr(0, times.size() - 1)) && times.size() <= 8)),
                "Slurm tasks per node '{}': expected counts like 2 or 2(x3), comma-separated", spec);
    const int n = std::stoi(count);
    const int repeat = std::stoi(paren == std::string::npos ? times : times.substr(0, times.size() - 1));
    tasks.insert(tasks.end(), static_cast<size_t>(repeat), n);
    start = comma + 1;
  }
  return tasks;
}

DistributedEnv distributed_env() {
  DistributedEnv env;
  constexpr int kMax = 1 << 20;
  if (has("RANK") || has("WORLD_SIZE")) {
    env.source = "torchrun";
    env.rank = read_int("RANK", 0, 0, kMax);
    env.world_size = read_int("WORLD_SIZE", 1, 1, kMax);
    env.local_rank = read_int("LOCAL_RANK", env.rank, 0, kMax);
    env.local_world_size = read_int("LOCAL_WORLD_SIZE", env.world_size, 1, kMax);
  } else if (has("SLURM_PROCID") && has("SLURM_STEP_NUM_TASKS")) {
    // Inside an srun step (the batch script's shell has no SLURM_STEP_* variables).
    env.source = "slurm";
    env.rank = read_int("SLURM_PROCID", 0, 0, kMax);
    env.world_size = read_int("SLURM_STEP_NUM_TASKS", read_int("SLURM_NTASKS", 1, 1, kMax), 1, kMax);
    env.local_rank = read_int("SLURM_LOCALID", 0, 0, kMax);
    const int node = read_int("SLURM_NODEID", 0, 0, kMax);
    if (const auto [name, spec] = first_set({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}); name) {
      const std::vector<int> tasks = parse_slurm_tasks_per_node(spec);
      NABLA_CHECK(static_cast<size_t>(node) < tasks.size(), "SLURM_NODEID={} but {}='{}' lists {} nodes",
                  node, name, spec, tasks.size());
      env.local_world_size = tasks[static_cast<size_t>(node)];
    } else {
      env.local_world_size = env.world_size;
    }
    if (const auto [name, list] = first_set({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
        name)
      env.master_addr = parse_slurm_hostlist(list).front();
    env.master_port = 20000 + read_int("SLURM_JOB_ID", 0, 0, 1 << 30) % 10000;
  } else if (has("OMPI_COMM_WORLD_RANK")) {
    env.source = "openmpi";
    env.rank = read_int("OMPI_COMM_WORLD_RANK", 0, 0, kMax);
    env.world_size = read_int("OMPI_COMM_WORLD_SIZE", 1, 1, kMax);
    env.local_rank = read_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, kMax);
    env.local_world_size = read_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1, kMax);
  } else if (has("PMI_RANK")) {
    env.source = "mpich";
    env.rank = read_int("PMI_RANK", 0, 0, kMax);
    env.world_size = read_int("PMI_SIZE", 1, 1, kMax);
    env.local_rank = read_int("MPI_LOCALRANKID", 0, 0, kMax);
    env.local_world_size = read_int("MPI_LOCALNRANKS", 1, 1, kMax);
  }
  if (has("MASTER_ADDR")) env.master_addr = std::getenv("MASTER_ADDR");
  env.master_port = read_int("MASTER_PORT", env.master_port, 1, 65535);
  // Under torchrun the elastic agent's own store listens on MASTER_PORT (it says so with
  // TORCHELASTIC_USE_AGENT_STORE), and under nabla-run the launchers' store does (NABLA_RUN):
  // nabla's takes the next port.
  if (env.source == "torchrun" && has("TORCHELASTIC_RUN_ID")) {
    env.source = has("NABLA_RUN") ? "nabla-run" : "torchelastic";
    NABLA_CHECK(env.master_port < 65535, "MASTER_PORT={} under {}: nabla's store needs the port after it",
                env.master_port, env.source);
    ++env.master_port;
  }
  NABLA_CHECK(env.rank < env.world_size, "rank {} (from {}) must be below the world size {}", env.rank,
              env.source, env.world_size);
  NABLA_CHECK(env.local_rank < env.local_world_size,
              "local rank {} (from {}) must be below the local world size {}", env.local_rank, env.source,
              env.local_world_size);
  return env;
}

}  // namespace nabla::distributed
