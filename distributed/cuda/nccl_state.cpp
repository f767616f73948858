// The NCCL process group's launcher and watchdog (distributed/cuda/nccl_state.h): when a
// collective goes onto the communication stream, and how a fault or a timeout aborts the group.
#include "nabla/distributed/cuda/nccl_state.h"

#include "nabla/core/cuda/check.h"
#include "nabla/core/logging.h"

namespace nabla::distributed {

std::string format_seconds(std::chrono::milliseconds t) {
  return fmt::format("{:.1f} s", t.count() / 1e3);
}

void ProcessGroupNccl::State::check_healthy(const std::string& what) {
  std::lock_guard lock(mutex);
  if (failed) throw CollectiveError(fmt::format("{}: the process group has failed: {}", what, error));
}

void ProcessGroupNccl::State::abort(const std::string& reason) {
  std::lock_guard lock(mutex);
  if (failed) return;
  failed = true;
  error = reason;
  pending.clear();
  NABLA_LOG_WARN("aborting the NCCL communicator: {}", reason);
  ncclCommAbort(comm);  // ends in-flight kernels; never blocks on the peers
  launch_done.notify_all();
}

void ProcessGroupNccl::State::settle(ncclResult_t result, const std::string& what) {
  auto deadline = Clock::now() + timeout;
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) {
      abort(fmt::format("{} did not complete within {}", what, format_seconds(timeout)));
      break;
    }
    std::this_thread::yield();
    ncclCommGetAsyncError(comm, &result);
  }
  if (result != ncclSuccess && result != ncclInProgress) {
    abort(fmt::format("{} failed: {} ({})", what, ncclGetErrorString(result), ncclGetLastError(comm)));
  }
  check_healthy(what);
}

// Note [Launching collectives when their inputs are ready]: a collective queued on the
// communication stream behind a wait for the compute stream leaves that stream's hardware queue
// blocked on a semaphore, and while one is blocked the GPU's front end dispatches every compute
// kernel more slowly: the median gap between two compute kernels grew by almost half over the
// whole step (a CUPTI trace, tools/cupti_trace), a noticeable share of a ResNet-50 step in all,
// since the host runs a whole backward ahead of the GPU and so queues every bucket's wait early.
// In when-ready mode the host queues nothing on the communication stream until the caller's
// stream has reached the collective's inputs: the launcher thread polls the oldest ticket's
// ready event, then calls NCCL with nothing left to wait for. The exceptions keep the host ahead
// of the device where it would otherwise idle: launch_pending() (DDP calls it for its last
// bucket, whose result the step needs next) and a wait() on the newest ticket put what is
// queued on the stream at once, behind device-side waits. Tickets go out strictly in queue
// order, the same on every rank: only the queue's front is ever claimed, and it leaves the
// queue once it is on the stream.
void ProcessGroupNccl::State::launch_loop() {
  NABLA_CUDA_CHECK(cudaSetDevice(device));
  std::unique_lock lock(mutex);
  for (;;) {
    queued.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty()) return;  // stopping, and nothing left to launch
    std::shared_ptr<Ticket> t = queue.front();
    if (!t->claimed) {
      lock.unlock();
      const bool ready = wait_ready(*t);
      lock.lock();
      if (t->claimed) continue;  // a waiter launches it
      t->claimed = true;
      lock.unlock();
      if (ready) put_on_stream(*t, /*device_wait=*/false);
      lock.lock();
      finish_launch(t);
    } else {
      launch_done.wait(lock, [&] { return t->launched; });
    }
  }
}

bool ProcessGroupNccl::State::wait_ready(Ticket& t) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard lock(mutex);
      if (failed || t.claimed) return false;
    }
    try {
      if (t.ready->query()) return true;
    } catch (const std::exception& e) {
      abort(fmt::format("{}: the device failed before the collective: {}", t.what, e.what()));
      return false;
    }
    if (Clock::now() > deadline) {
      abort(fmt::format("{}: its inputs were not ready within {}", t.what, format_seconds(timeout)));
      return false;
    }
    // A sleep, not a spin: the thread shares the host with the data loader's workers, and
    // tens of microseconds are nothing against a backward pass.
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void ProcessGroupNccl::State::put_on_stream(Ticket& t, bool device_wait, bool watch) {
  try {
    if (device_wait) t.ready->block(stream);
    settle(t.call(static_cast<cudaStream_t>(stream.handle())), t.what);
    t.done->record(stream);
    if (!watch) return;
    std::lock_guard lock(mutex);
    pending.push_back({t.done, Clock::now(), t.what});
  } catch (const std::exception& e) {
    // settle has aborted the group already; any other failure (a CUDA error on the wait or
    // the event) must too, or a waiter would take the unrecorded done event for a finished one.
    abort(fmt::format("{} could not be launched: {}", t.what, e.what()));
  }
}

void ProcessGroupNccl::State::finish_launch(const std::shared_ptr<Ticket>& t) {
  queue.pop_front();
  t->launched = true;
  t->keep.clear();  // from here the allocator's record_stream guards the memory
  launch_done.notify_all();
}

void ProcessGroupNccl::State::flush() {
  std::unique_lock lock(mutex);
  while (!queue.empty() && !failed) {
    std::shared_ptr<Ticket> t = queue.front();
    if (t->claimed) {
      launch_done.wait(lock, [&] { return t->launched || failed; });
      continue;
    }
    t->claimed = true;
    lock.unlock();
    put_on_stream(*t, /*device_wait=*/true);
    lock.lock();
    finish_launch(t);
  }
}

void ProcessGroupNccl::State::ensure_launched(const std::shared_ptr<Ticket>& t) {
  bool newest = false;
  {
    std::lock_guard lock(mutex);
    newest = !t->launched && !queue.empty() && queue.back() == t;
  }
  if (newest) flush();
  std::unique_lock lock(mutex);
  const bool in_time = launch_done.wait_for(lock, timeout, [&] { return t->launched || failed; });
  if (failed) throw CollectiveError(fmt::format("{}: the process group has failed: {}", t->what, error));
  if (!in_time) {
    lock.unlock();
    const std::string reason = fmt::format("{} was not launched within {}", t->what, format_seconds(timeout));
    abort(reason);
    throw CollectiveError(reason);
  }
}

void ProcessGroupNccl::State::watch() {
  NABLA_CUDA_CHECK(cudaSetDevice(device));
  std::unique_lock lock(mutex);
  while (!stopping) {
    wake.wait_for(lock, std::chrono::milliseconds(50));
    if (stopping || failed) continue;
    std::erase_if(pending, [](const Pending& p) {
      try {
        return p.done->query();
      } catch (const std::exception&) {
        return false;  // a sticky error; the async-error check below reports it
      }
    });
    std::string reason;
    if (!pending.empty() && Clock::now() - pending.front().start > timeout) {
      reason = fmt::format("{} did not complete within {}; a peer rank may have died or hung",
                           pending.front().what, format_seconds(timeout));
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (reason.empty() && async != ncclSuccess && async != ncclInProgress) {
      reason =
          fmt::format("rank {}: NCCL reported an asynchronous error: {}", rank, ncclGetErrorString(async));
    }
    if (!reason.empty()) {
      lock.unlock();
      abort(reason);
      lock.lock();
    }
  }
}

}  // namespace nabla::distributed
