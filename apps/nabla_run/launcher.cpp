#include "launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "nabla/core/error.h"
#include "rendezvous.h"

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

// The environment of one rank: this process's, with the variables torchrun sets.
std::vector<std::string> rank_environment(const LaunchOptions& o, const Rank& rank, int world, int round) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank.global)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(rank.local)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)},
      // As torchrun: the launchers' store holds MASTER_PORT, so the ranks' store takes the next
      // port (distributed/env.h), and the restart count is the rendezvous round.
      {"TORCHELASTIC_RUN_ID", "nabla-run"},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(round)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"NABLA_RUN", "1"},
  };
  std::vector<std::string> env;
  bool nvls_set = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string name = var.substr(0, var.find('='));
    if (name == "NCCL_NVLS_ENABLE") nvls_set = true;
    bool replaced = false;
    for (const auto& [key, value] : ours) replaced = replaced || key == name;
    if (!replaced) env.push_back(var);
  }
  for (const auto& [key, value] : ours) env.push_back(fmt::format("{}={}", key, value));
  // NVLink SHARP multicast is off unless the user asked for it (see docs/distributed.md).
  if (!nvls_set) env.push_back("NCCL_NVLS_ENABLE=0");
  return env;
}

pid_t start_rank(const LaunchOptions& o, Rank& rank, int world, int round) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw Error(std::string("nabla-run: pipe failed: ") + std::strerror(errno));
  }
  // Everything the child needs is built here: node 0 runs the store's thread, so between fork
  // and exec the child may only make async-signal-safe calls (no malloc, no stdio).
  std::vector<std::string> env = rank_environment(o, rank, world, round);
  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string cannot = "nabla-run: cannot execute '" + o.command.front() + "': ";
  const pid_t launcher = ::getpid();
  // Stop signals wait until the child has the default handlers back: one that arrived in between
  // would otherwise reach our handler's copy in the child and be lost.
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &stop_signals, &previous);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    throw Error(std::string("nabla-run: fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    ::setpgid(0, 0);  // its own group, so a terminal's Ctrl-C reaches the ranks only through us
    // A rank dies with its launcher (killed, or its node's job step cancelled): it must not
    // stay behind in a job whose other nodes start a new round without it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(128 + SIGKILL);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    const char* reason = std::strerror(error);  // glibc: a static string for a known errno
    (void)!::write(STDERR_FILENO, cannot.data(), cannot.size());
    (void)!::write(STDERR_FILENO, reason, std::strlen(reason));
    (void)!::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  // Also here, so that a signal forwarded right after the fork finds the group.
  ::setpgid(pid, pid);
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
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
  NABLA_CHECK(o.master_port >= 1 && o.master_port < 65535,
              "--master-port {} must be in [1, 65534] (the ranks' store takes the port after it)",
              o.master_port);
  NABLA_CHECK(o.max_restarts >= 0, "--max-restarts must be 0 or more, got {}", o.max_restarts);
  NABLA_CHECK(o.monitor_interval > 0, "--monitor-interval must be positive, got {}", o.monitor_interval);
  NABLA_CHECK(o.rdzv_timeout > 0, "--rdzv-timeout must be positive, got {}", o.rdzv_timeout);
  NABLA_CHECK(!o.command.empty(), "nabla-run: no command given; usage: nabla-run [options] -- CMD [ARGS...]");
}

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

// How one round ended on this node.
struct RoundResult {
  int code = 0;         // what nabla-run exits with if this round is the last
  std::string failure;  // empty when every rank of the round succeeded
  bool final = false;   // no restart: stopped by a signal, or the launchers' store is lost
};

// Watches this node's ranks until all have exited: forwards their output, forwards signals,
// stops the others when one fails, and keeps in touch with the other nodes (Rendezvous::poll).
// Each pass of run()'s loop is one call of each phase.
class Supervisor {
 public:
  Supervisor(const LaunchOptions& o, std::vector<Rank>& ranks, Rendezvous& rdzv)
      : o_(o), ranks_(ranks), rdzv_(rdzv) {}

  RoundResult run() {
    for (;;) {
      forward_signals();
      pump_output();
      if (reap()) break;
      enforce_deadline();
      monitor();
    }
    // Flush whatever the ranks wrote last.
    for (auto& r : ranks_) {
      drain(r, r.out, r.out_partial, stdout, false, o_.prefix_output);
      drain(r, r.err, r.err_partial, stderr, true, o_.prefix_output);
    }
    return {result_, failure_, final_};
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
    if (!stopping_) begin_stopping();
    result_ = 128 + sig;
    // Even after another failure: a signal ends the job on every node, with no restart.
    if (!final_)
      fail(fmt::format("nabla-run on node {} got {}", o_.node_rank, strsignal(sig)), /*final=*/true);
  }

  // Records this round's failure and tells the other nodes, once (and once more if it turns
  // final).
  void fail(const std::string& what, bool final) {
    if (!failure_.empty() && (final_ || !final)) return;
    if (failure_.empty()) failure_ = what;
    final_ = final;
    if (store_lost_) return;
    try {
      rdzv_.report_failure(what, final);
    } catch (const Error& e) {
      lose_store(e);
    }
  }

  // No restart without the store: the job ends.
  void lose_store(const Error& e) {
    store_lost_ = true;
    final_ = true;
    const std::string what =
        o_.node_rank == 0
            ? fmt::format("the launchers' store that node 0 hosts at {} failed", rdzv_.describe_store())
            : fmt::format("node 0 is gone: lost the launchers' store at {}, which its nabla-run hosts",
                          rdzv_.describe_store());
    std::fprintf(stderr, "nabla-run: %s (%s)\n", what.c_str(), e.what());
    if (failure_.empty()) failure_ = what;
  }

  // Heartbeats, and what the other nodes report: another node's failure stops this node's ranks.
  void monitor() {
    if (store_lost_) return;
    std::optional<Rendezvous::Failure> remote;
    try {
      remote = rdzv_.poll();
    } catch (const Error& e) {
      lose_store(e);
      if (!stopping_) stop_everyone(1);
      return;
    }
    if (!remote || stopping_) return;
    failure_ = remote->what;
    final_ = remote->final;
    std::fprintf(stderr, "nabla-run: node %d stops its ranks: %s\n", o_.node_rank, remote->what.c_str());
    stop_everyone(1);
  }

  void stop_everyone(int code) {
    if (result_ == 0) result_ = code;
    signal_all(ranks_, SIGTERM);
    begin_stopping();
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
    fail(fmt::format("rank {} (node {}, local rank {}) {}", r.global, o_.node_rank, r.local,
                     describe_status(status)),
         /*final=*/false);
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
  Rendezvous& rdzv_;
  int result_ = 0;
  std::string failure_;
  bool final_ = false;
  bool store_lost_ = false;
  int failed_rank_ = -1;
  bool stopping_ = false;
  int forwarded_ = 0;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace

namespace {

bool interrupted() {
  return signals_seen > 0;
}

// Ends the job on this node after `what`: says so, tells the other nodes (if the store still
// answers) and returns the exit code, 128 + the signal after a stop signal.
int give_up(Rendezvous* rdzv, const std::string& what, int code) {
  std::fprintf(stderr, "nabla-run: the job failed: %s\n", what.c_str());
  if (rdzv != nullptr) {
    try {
      rdzv->report_failure(what, /*final=*/true);
      rdzv->leave();
    } catch (const Error&) {
      // The store is gone (node 0 ended or died): nothing is left to tell.
    }
  }
  if (interrupted()) return 128 + pending_signal;
  return code != 0 ? code : 1;
}

}  // namespace

int launch(const LaunchOptions& o) {
  check_options(o);
  const int world = o.nproc_per_node * o.nnodes;
  catch_stop_signals();
  std::unique_ptr<Rendezvous> rdzv;
  try {
    rdzv = std::make_unique<Rendezvous>(o, interrupted);
  } catch (const Error& e) {
    return give_up(nullptr, e.what(), 1);
  }
  for (int round = 0;; ++round) {
    try {
      rdzv->join(round);
    } catch (const Error& e) {
      return give_up(rdzv.get(), e.what(), 1);
    }
    std::vector<Rank> ranks(o.nproc_per_node);
    for (int i = 0; i < o.nproc_per_node; ++i) {
      ranks[i].local = i;
      ranks[i].global = o.node_rank * o.nproc_per_node + i;
      start_rank(o, ranks[i], world, round);
    }
    const RoundResult result = Supervisor(o, ranks, *rdzv).run();
    // This node's ranks all succeeded: the round did if every node's did.
    std::optional<Rendezvous::Failure> failure;
    if (!result.failure.empty()) {
      failure = Rendezvous::Failure{result.failure, result.final};
    } else {
      try {
        failure = rdzv->settle();
      } catch (const Error& e) {
        failure = Rendezvous::Failure{e.what(), /*final=*/true};
      }
    }
    if (!failure) {
      try {
        rdzv->leave();
      } catch (const Error&) {
        // Every node finished; one that left first may have taken node 0's store with it.
      }
      return 0;
    }
    if (!failure->final && round < o.max_restarts && !interrupted()) {
      std::fprintf(stderr, "nabla-run: restart %d of %d (rendezvous round %d) after: %s\n", round + 1,
                   o.max_restarts, round + 1, failure->what.c_str());
      continue;
    }
    const std::string why =
        failure->final || o.max_restarts == 0
            ? failure->what
            : fmt::format("{} (no restarts left of --max-restarts {})", failure->what, o.max_restarts);
    return give_up(rdzv.get(), why, result.code);
  }
}

}  // namespace nabla::apps
