#include "launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "nabla/core/error.h"

namespace nabla::apps {
namespace {

volatile sig_atomic_t pending_signal = 0;
volatile sig_atomic_t signals_seen = 0;

void on_signal(int sig) {
  pending_signal = sig;
  signals_seen = signals_seen + 1;
}

struct Rank {
  int local = 0;
  int global = 0;
  pid_t pid = 0;
  int out = -1, err = -1;  // read ends of the rank's stdout and stderr
  std::string out_partial, err_partial;
  std::deque<std::string> last_lines;  // the last lines of stderr, for the failure report
  bool exited = false;
  int code = 0;
};

constexpr size_t kKeptLines = 12;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Forwards whole lines from `fd` to `sink` with the rank prefix; keeps stderr's last lines.
void pump(Rank& rank, int& fd, std::string& partial, FILE* sink, bool keep, bool prefix) {
  char buffer[8192];
  ssize_t n = ::read(fd, buffer, sizeof(buffer));
  if (n <= 0) {
    if (n < 0 && errno == EINTR) return;
    if (!partial.empty()) {
      std::fprintf(sink, "%s%s\n", prefix ? fmt::format("[rank {}] ", rank.global).c_str() : "",
                   partial.c_str());
      if (keep) rank.last_lines.push_back(partial);
      partial.clear();
    }
    ::close(fd);
    fd = -1;
    return;
  }
  partial.append(buffer, static_cast<size_t>(n));
  size_t start = 0, newline;
  while ((newline = partial.find('\n', start)) != std::string::npos) {
    std::string line = partial.substr(start, newline - start);
    std::fprintf(sink, "%s%s\n", prefix ? fmt::format("[rank {}] ", rank.global).c_str() : "", line.c_str());
    if (keep) {
      rank.last_lines.push_back(line);
      if (rank.last_lines.size() > kKeptLines) rank.last_lines.pop_front();
    }
    start = newline + 1;
  }
  partial.erase(0, start);
  std::fflush(sink);
}

pid_t start_rank(const LaunchOptions& o, Rank& rank, int world) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw Error(std::string("nabla-run: pipe failed: ") + std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("nabla-run: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so a terminal's Ctrl-C reaches the ranks only through us
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
    set("RANK", std::to_string(rank.global));
    set("WORLD_SIZE", std::to_string(world));
    set("LOCAL_RANK", std::to_string(rank.local));
    set("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node));
    set("GROUP_RANK", std::to_string(o.node_rank));
    set("MASTER_ADDR", o.master_addr);
    set("MASTER_PORT", std::to_string(o.master_port));
    // NVLink SHARP multicast is off unless the user asked for it (see docs/distributed.md).
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "nabla-run: cannot execute '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  rank.pid = pid;
  rank.out = out[0];
  rank.err = err[0];
  return pid;
}

// Signals each rank's whole process group (a rank that is a shell script has children too, and
// they may outlive it).
void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks) ::kill(-r.pid, sig);
}

// Forwards what is left in a pipe after its rank exited; gives up when nothing arrives for a
// while (a grandchild the rank left behind may hold the pipe open).
void drain(Rank& r, int& fd, std::string& partial, FILE* sink, bool keep, bool prefix) {
  while (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) {
      ::close(fd);
      fd = -1;
      break;
    }
    pump(r, fd, partial, sink, keep, prefix);
  }
}

void check_options(const LaunchOptions& o) {
  NABLA_CHECK(o.nproc_per_node >= 1, "--nproc-per-node must be at least 1, got {}", o.nproc_per_node);
  NABLA_CHECK(o.nnodes >= 1, "--nnodes must be at least 1, got {}", o.nnodes);
  NABLA_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank {} must be in [0, {})", o.node_rank,
              o.nnodes);
  NABLA_CHECK(o.master_port >= 1 && o.master_port <= 65535, "--master-port {} must be in [1, 65535]",
              o.master_port);
  NABLA_CHECK(!o.command.empty(), "nabla-run: no command given; usage: nabla-run [options] -- CMD [ARGS...]");
}

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

// Watches this node's ranks until all have exited: forwards their output, forwards signals, and
// stops the others when one fails. Each pass of run()'s loop is one call of each phase.
class Supervisor {
 public:
  Supervisor(const LaunchOptions& o, std::vector<Rank>& ranks) : o_(o), ranks_(ranks) {}

  int run() {
    for (;;) {
      forward_signals();
      pump_output();
      if (reap()) break;
      enforce_deadline();
    }
    // Flush whatever the ranks wrote last.
    for (auto& r : ranks_) {
      drain(r, r.out, r.out_partial, stdout, false, o_.prefix_output);
      drain(r, r.err, r.err_partial, stderr, true, o_.prefix_output);
    }
    return result_;
  }

 private:
  // Asks every rank to stop, and kills them if they have not after --grace-seconds.
  void begin_stopping() {
    stopping_ = true;
    deadline_ =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(o_.grace_seconds));
  }

  // The first signal asks the ranks to stop, a second (or a late one) kills them.
  void forward_signals() {
    if (signals_seen <= forwarded_) return;
    const int sig = pending_signal;
    forwarded_ = signals_seen;
    const bool kill_now = forwarded_ > 1;
    std::fprintf(stderr, "nabla-run: %s; %s\n", strsignal(sig),
                 kill_now ? "killing every rank" : "forwarding it to every rank");
    signal_all(ranks_, kill_now ? SIGKILL : sig);
    if (!stopping_) {
      begin_stopping();
      if (result_ == 0) result_ = 128 + sig;
    }
  }

  // Forwards what the ranks wrote, waiting up to 50 ms for something to arrive.
  void pump_output() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, bool>> owners;  // (rank, is stderr)
    for (auto& r : ranks_) {
      if (r.out >= 0) fds.push_back({r.out, POLLIN, 0}), owners.emplace_back(&r, false);
      if (r.err >= 0) fds.push_back({r.err, POLLIN, 0}), owners.emplace_back(&r, true);
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Rank& r = *owners[i].first;
      if (owners[i].second) {
        pump(r, r.err, r.err_partial, stderr, true, o_.prefix_output);
      } else {
        pump(r, r.out, r.out_partial, stdout, false, o_.prefix_output);
      }
    }
  }

  // Collects the ranks that exited; true when none is left running.
  bool reap() {
    bool all_done = true;
    for (auto& r : ranks_) {
      if (r.exited) continue;
      int status = 0;
      if (::waitpid(r.pid, &status, WNOHANG) != r.pid) {
        all_done = false;
        continue;
      }
      r.exited = true;
      r.code = exit_code(status);
      if (r.code != 0 && failed_rank_ < 0 && !stopping_) on_failure(r, status);
    }
    return all_done;
  }

  // The first rank to fail sets the exit code; its last error lines are reported, and the
  // others are stopped.
  void on_failure(Rank& r, int status) {
    failed_rank_ = r.global;
    result_ = r.code;
    drain(r, r.err, r.err_partial, stderr, true, o_.prefix_output);
    std::string lines;
    for (const auto& l : r.last_lines) lines += "    " + l + "\n";
    std::fprintf(stderr, "nabla-run: rank %d (local rank %d, pid %d) %s; stopping the other ranks.\n%s%s",
                 r.global, r.local, r.pid, describe_status(status).c_str(),
                 lines.empty() ? "" : "  its last error output:\n", lines.c_str());
    signal_all(ranks_, SIGTERM);
    begin_stopping();
  }

  void enforce_deadline() {
    if (!stopping_ || std::chrono::steady_clock::now() <= deadline_) return;
    std::fprintf(stderr, "nabla-run: ranks still running %.0f s after SIGTERM; killing them\n",
                 o_.grace_seconds);
    signal_all(ranks_, SIGKILL);
    deadline_ = std::chrono::steady_clock::time_point::max();
  }

  const LaunchOptions& o_;
  std::vector<Rank>& ranks_;
  int result_ = 0;
  int failed_rank_ = -1;
  bool stopping_ = false;
  int forwarded_ = 0;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace

int launch(const LaunchOptions& o) {
  check_options(o);
  const int world = o.nproc_per_node * o.nnodes;
  catch_stop_signals();
  std::vector<Rank> ranks(o.nproc_per_node);
  for (int i = 0; i < o.nproc_per_node; ++i) {
    ranks[i].local = i;
    ranks[i].global = o.node_rank * o.nproc_per_node + i;
    start_rank(o, ranks[i], world);
  }
  return Supervisor(o, ranks).run();
}

}  // namespace nabla::apps
