#include "nabla/apps/train_support/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "nabla/core/error.h"

namespace nabla::train_support {
namespace {

// The one owner of this process-wide state. Lock-free atomics are async-signal-safe.
std::atomic<int> g_first_signal{0};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

void write_stderr(const char* message) {
  // write(2) is async-signal-safe; a short or failed write of a message is not worth handling.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, message, std::strlen(message));
}

extern "C" void on_stop_signal(int signo) {
  int expected = 0;
  if (!g_first_signal.compare_exchange_strong(expected, signo)) {
    write_stderr("\nnabla: second signal, exiting now without saving\n");
    ::_exit(128 + signo);
  }
  write_stderr(signo == SIGINT
                   ? "\nnabla: SIGINT received; stopping at the next step boundary after a checkpoint "
                     "(send it again to exit at once)\n"
                   : "\nnabla: SIGTERM received; stopping at the next step boundary after a checkpoint "
                     "(send it again to exit at once)\n");
}

}  // namespace

struct StopSignal::Saved {
  struct sigaction interrupt {};
  struct sigaction terminate {};
};

StopSignal::StopSignal() : saved_(std::make_unique<Saved>()) {
  bool was_installed = g_installed.exchange(true);
  NABLA_CHECK(!was_installed,
              "StopSignal: another StopSignal is already installed (signal handlers are per process)");
  g_first_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read in the data loader is resumed rather than failing with EINTR; the flag is
  // only looked at between steps anyway.
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, &saved_->interrupt);
  ::sigaction(SIGTERM, &action, &saved_->terminate);
}

StopSignal::~StopSignal() {
  ::sigaction(SIGINT, &saved_->interrupt, nullptr);
  ::sigaction(SIGTERM, &saved_->terminate, nullptr);
  g_installed.store(false);
}

bool StopSignal::requested() const {
  return g_first_signal.load() != 0;
}

int StopSignal::signal() const {
  return g_first_signal.load();
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a signal";
  }
}

}  // namespace nabla::train_support
