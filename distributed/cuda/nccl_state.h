// Internal (distributed, CUDA). The state behind a ProcessGroupNccl: the communicator, its
// stream, the launcher thread that puts collectives on that stream once their inputs are ready,
// and the watchdog that aborts the communicator on an error or a timeout. The collectives
// themselves (process_group_nccl.cpp) only build tickets and hand them to this state.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nabla/core/cuda/stream.h"
#include "nabla/distributed/process_group_nccl.h"

namespace nabla::distributed {

using Clock = std::chrono::steady_clock;

// "12.3 s", for timeout messages.
std::string format_seconds(std::chrono::milliseconds t);

struct ProcessGroupNccl::State {
  struct Pending {
    std::shared_ptr<cuda::Event> done;
    Clock::time_point start;
    std::string what;
  };

  // One collective on its way to the communication stream (see launch_loop).
  struct Ticket {
    std::shared_ptr<cuda::Event> ready;  // on the caller's stream, where the collective's inputs are written
    std::function<ncclResult_t(cudaStream_t)> call;
    std::vector<Tensor> keep;  // alive until the collective is on the stream
    std::string what;
    std::shared_ptr<cuda::Event> done = std::make_shared<cuda::Event>();
    bool claimed = false;   // under mutex: a thread has taken it to launch
    bool launched = false;  // under mutex: it is on the stream, or it never will be (failure)
  };

  int rank = 0, size = 0, device = 0;
  std::chrono::milliseconds timeout{};
  ncclComm_t comm = nullptr;
  cuda::Stream stream;  // the communication stream
  std::mutex mutex;
  bool failed = false;
  std::string error;
  std::vector<Pending> pending;
  std::condition_variable wake;
  bool stopping = false;
  std::thread watchdog;
  // NABLA_NCCL_LAUNCH=when-ready (the default): collectives go through the launcher thread
  // (launch_loop); eager: straight onto the stream, behind a device-side wait.
  bool launch_when_ready = true;
  std::deque<std::shared_ptr<Ticket>> queue;  // under mutex
  std::condition_variable queued, launch_done;
  std::thread launcher;

  // Throws CollectiveError, naming `what`, once the group has failed.
  void check_healthy(const std::string& what);
  // Marks the group failed and aborts the communicator (never blocks on the peers).
  void abort(const std::string& reason);
  // In non-blocking mode a call may return ncclInProgress: poll until it settles or times out.
  void settle(ncclResult_t result, const std::string& what);
  // Note [Launching collectives when their inputs are ready] (the .cpp): the launcher thread.
  void launch_loop();
  // Polls until t's inputs are ready (true), or a waiter claimed it, the group failed or the
  // timeout passed (false).
  bool wait_ready(Ticket& t);
  // Calls NCCL for t on the communication stream (device_wait: behind a device-side wait for its
  // inputs). Only the thread that claimed t calls this. A failure aborts the group, and the
  // waiters see it.
  // watch = false: the watchdog does not track it (a collective captured into a CUDA graph,
  // whose done event a query from the watchdog's thread must not touch).
  void put_on_stream(Ticket& t, bool device_wait, bool watch = true);
  // Under mutex: t, the front, is on the stream (or the group failed).
  void finish_launch(const std::shared_ptr<Ticket>& t);
  // Puts every queued ticket on the communication stream now, in order, behind device-side
  // waits (a ticket the launcher thread is launching is waited for).
  void flush();
  // Blocks the host until `t` is on the communication stream (or throws if the group failed).
  // The newest ticket is flushed at once (Note [Launching collectives when their inputs are ready]).
  void ensure_launched(const std::shared_ptr<Ticket>& t);
  // The watchdog thread: aborts on an asynchronous NCCL error or a collective past its timeout.
  void watch();
};

}  // namespace nabla::distributed
