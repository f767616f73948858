#include "nabla/distributed/process_group_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/logging.h"
#include "nabla/ops/factory.h"

namespace nabla::distributed {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype, const char* collective) {
  switch (dtype) {
    case kFloat32:
      return ncclFloat32;
    case kFloat64:
      return ncclFloat64;
    case kFloat16:
      return ncclFloat16;
    case kBFloat16:
      return ncclBfloat16;
    case kInt32:
      return ncclInt32;
    case kInt64:
      return ncclInt64;
    case kUInt8:
      return ncclUint8;
    default:
      NABLA_CHECK(false, "{} (nccl): dtype {} is not supported", collective, dtype_name(dtype));
  }
  __builtin_unreachable();
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::average:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

std::string seconds(std::chrono::milliseconds t) {
  return fmt::format("{:.1f} s", t.count() / 1e3);
}

// Communicators created so far in this process: every rank creates its groups in the same order,
// so the count names the store key of the next group's NCCL id.
std::atomic<int> groups_created{0};

}  // namespace

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

  void check_healthy(const std::string& what) {
    std::lock_guard lock(mutex);
    if (failed) throw CollectiveError(fmt::format("{}: the process group has failed: {}", what, error));
  }

  void abort(const std::string& reason) {
    std::lock_guard lock(mutex);
    if (failed) return;
    failed = true;
    error = reason;
    pending.clear();
    NABLA_LOG_WARN("aborting the NCCL communicator: {}", reason);
    ncclCommAbort(comm);  // ends in-flight kernels; never blocks on the peers
    launch_done.notify_all();
  }

  // In non-blocking mode a call may return ncclInProgress: poll until it settles or times out.
  void settle(ncclResult_t result, const std::string& what) {
    auto deadline = Clock::now() + timeout;
    while (result == ncclInProgress) {
      if (Clock::now() > deadline) {
        abort(fmt::format("{} did not complete within {}", what, seconds(timeout)));
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
  // kernel more slowly: on the H200 the median gap between two compute kernels grew from 1.5 to
  // 2.2 us for the whole step (a CUPTI trace, tools/cupti_trace), 0.6-0.8 ms per ResNet-50 step,
  // since the host runs a whole backward ahead of the GPU and so queues every bucket's wait early.
  // In when-ready mode the host queues nothing on the communication stream until the caller's
  // stream has reached the collective's inputs: the launcher thread polls the oldest ticket's
  // ready event, then calls NCCL with nothing left to wait for. The exceptions keep the host ahead
  // of the device where it would otherwise idle: launch_pending() (DDP calls it for its last
  // bucket, whose result the step needs next) and a wait() on the newest ticket put what is
  // queued on the stream at once, behind device-side waits. Tickets go out strictly in queue
  // order, the same on every rank: only the queue's front is ever claimed, and it leaves the
  // queue once it is on the stream.
  void launch_loop() {
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

  // Polls until t's inputs are ready (true), or a waiter claimed it, the group failed or the
  // timeout passed (false).
  bool wait_ready(Ticket& t) {
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
        abort(fmt::format("{}: its inputs were not ready within {}", t.what, seconds(timeout)));
        return false;
      }
      // A sleep, not a spin: the thread shares the host with the data loader's workers, and
      // tens of microseconds are nothing against a backward pass.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Calls NCCL for t on the communication stream (device_wait: behind a device-side wait for its
  // inputs). Only the thread that claimed t calls this. A failure aborts the group, and the
  // waiters see it.
  void put_on_stream(Ticket& t, bool device_wait) {
    try {
      if (device_wait) t.ready->block(stream);
      settle(t.call(static_cast<cudaStream_t>(stream.handle())), t.what);
      t.done->record(stream);
      std::lock_guard lock(mutex);
      pending.push_back({t.done, Clock::now(), t.what});
    } catch (const std::exception& e) {
      // settle has aborted the group already; any other failure (a CUDA error on the wait or
      // the event) must too, or a waiter would take the unrecorded done event for a finished one.
      abort(fmt::format("{} could not be launched: {}", t.what, e.what()));
    }
  }

  // Under mutex: t, the front, is on the stream (or the group failed).
  void finish_launch(const std::shared_ptr<Ticket>& t) {
    queue.pop_front();
    t->launched = true;
    t->keep.clear();  // from here the allocator's record_stream guards the memory
    launch_done.notify_all();
  }

  // Puts every queued ticket on the communication stream now, in order, behind device-side
  // waits (a ticket the launcher thread is launching is waited for).
  void flush() {
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

  // Blocks the host until `t` is on the communication stream (or throws if the group failed).
  // The newest ticket is flushed at once (see the note above).
  void ensure_launched(const std::shared_ptr<Ticket>& t) {
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
      const std::string reason = fmt::format("{} was not launched within {}", t->what, seconds(timeout));
      abort(reason);
      throw CollectiveError(reason);
    }
  }

  void watch() {
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
                             pending.front().what, seconds(timeout));
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
};

namespace {

class NcclWork : public Work {
 public:
  using Ticket = ProcessGroupNccl::State::Ticket;
  NcclWork(std::shared_ptr<ProcessGroupNccl::State> state, std::shared_ptr<Ticket> ticket, bool host_wait)
      : state_(std::move(state)), ticket_(std::move(ticket)), host_wait_(host_wait) {}

  bool is_completed() override {
    std::lock_guard lock(state_->mutex);
    return state_->failed || (ticket_->launched && ticket_->done->query());
  }
  // The host waits only until the collective is on the communication stream (it is launched as
  // soon as its inputs are ready); the caller's stream then waits for it on the device.
  void wait() override {
    if (host_wait_) return wait(state_->timeout);
    state_->ensure_launched(ticket_);
    state_->check_healthy(ticket_->what);
    ticket_->done->block(cuda::current_stream(state_->device));
  }
  void wait(std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    state_->ensure_launched(ticket_);
    for (;;) {
      state_->check_healthy(ticket_->what);
      if (ticket_->done->query()) return;
      if (Clock::now() > deadline) {
        std::string reason = fmt::format("{} did not complete within {}", ticket_->what, seconds(timeout));
        state_->abort(reason);
        throw CollectiveError(reason);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<ProcessGroupNccl::State> state_;
  std::shared_ptr<Ticket> ticket_;
  bool host_wait_;
};

}  // namespace

ProcessGroupNccl::ProcessGroupNccl(Store& store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size, options), state_(std::make_shared<State>()) {
  NABLA_CHECK(size >= 1 && rank >= 0 && rank < size,
              "ProcessGroupNccl: rank {} and world size {} must satisfy 0 <= rank < size", rank, size);
  NABLA_CHECK(cuda::is_available(), "ProcessGroupNccl: no CUDA device is available");
  auto& s = *state_;
  s.rank = rank;
  s.size = size;
  s.device = cuda::current_device();
  s.timeout = options.timeout;
  s.stream = cuda::stream_from_pool(s.device, /*high_priority=*/true);

  // Rank 0's unique id reaches the others through the store, one key per communicator.
  std::string key = fmt::format("nccl_unique_id/{}", groups_created++);
  ncclUniqueId id;
  if (rank == 0) {
    NABLA_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ProcessGroupNccl: ncclGetUniqueId failed");
    store.set(key, Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
  } else {
    Bytes bytes = store.get(key, options.timeout);
    NABLA_CHECK(bytes.size() == sizeof(id), "ProcessGroupNccl: the store's NCCL id has {} bytes, expected {}",
                bytes.size(), sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so a missing peer is a timeout we can abort, not a hang
  ncclResult_t result = ncclCommInitRankConfig(&s.comm, size, id, rank, &config);
  s.settle(result, fmt::format("rank {}: NCCL initialization of {} ranks", rank, size));
  s.watchdog = std::thread([&s] { s.watch(); });
  if (const char* mode = std::getenv("NABLA_NCCL_LAUNCH")) {
    const std::string m = mode;
    NABLA_CHECK(m == "eager" || m == "when-ready", "NABLA_NCCL_LAUNCH={}: expected eager or when-ready", m);
    s.launch_when_ready = m == "when-ready";
  }
  if (s.launch_when_ready) s.launcher = std::thread([&s] { s.launch_loop(); });
}

ProcessGroupNccl::~ProcessGroupNccl() {
  auto& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    s.stopping = true;
  }
  s.wake.notify_all();
  s.queued.notify_all();
  if (s.launcher.joinable()) s.launcher.join();  // launches what is queued (or skips it on failure)
  if (s.watchdog.joinable()) s.watchdog.join();
  if (s.comm == nullptr) return;
  // Destroy only a communicator whose work has drained; otherwise abort, which never blocks.
  bool drained = !s.failed;
  if (drained) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (cudaStreamQuery(static_cast<cudaStream_t>(s.stream.handle())) == cudaErrorNotReady) {
      if (Clock::now() > deadline) {
        drained = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (!s.failed) {
    if (drained) {
      ncclCommDestroy(s.comm);
    } else {
      ncclCommAbort(s.comm);
    }
  }
}

void ProcessGroupNccl::launch_pending() {
  state_->flush();
}

void ProcessGroupNccl::abort(const std::string& reason) {
  state_->abort(fmt::format("rank {}: {}", rank_, reason));
}

namespace {

// Puts the collective `launch` on the communication stream, ordered after the caller's current
// stream: at once, behind a device-side wait (eager), or from the launcher thread once the
// caller's stream has reached this point (when-ready; Note [Launching collectives when their
// inputs are ready]). Keeps the tensors' memory from being reused until the collective is done,
// and returns its Work.
template <typename Launch>
std::shared_ptr<Work> run(const std::shared_ptr<ProcessGroupNccl::State>& state, std::string what,
                          std::initializer_list<const Tensor*> tensors, bool host_wait, Launch&& launch) {
  auto& s = *state;
  s.check_healthy(what);
  auto ticket = std::make_shared<ProcessGroupNccl::State::Ticket>();
  for (const Tensor* t : tensors) {
    NABLA_CHECK(t->device() == Device::cuda(s.device),
                "{}: tensors must be on this group's device cuda:{}, got {}", what, s.device,
                t->device().str());
    cuda::record_stream(*t, s.stream);
    ticket->keep.push_back(*t);
  }
  ticket->ready = std::make_shared<cuda::Event>();
  ticket->ready->record(cuda::current_stream(s.device));
  ticket->call = std::forward<Launch>(launch);
  ticket->what = what;
  if (!s.launch_when_ready) {
    // Eager: on the communication stream now, behind a device-side wait for the caller's stream.
    s.put_on_stream(*ticket, /*device_wait=*/true);
    s.check_healthy(what);  // throws if the launch failed (put_on_stream aborted the group)
    std::lock_guard lock(s.mutex);
    ticket->launched = true;
    ticket->keep.clear();
  } else {
    {
      std::lock_guard lock(s.mutex);
      s.queue.push_back(ticket);
    }
    s.queued.notify_one();
  }
  return std::make_shared<NcclWork>(state, std::move(ticket), host_wait);
}

std::string describe(const char* collective, int rank, const Tensor& t) {
  return fmt::format("rank {}: {} (nccl, {} x {})", rank, collective, t.numel(), dtype_name(t.dtype()));
}

}  // namespace

std::shared_ptr<Work> ProcessGroupNccl::allreduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  auto type = nccl_type(tensor.dtype(), "allreduce");
  NABLA_CHECK(op != ReduceOp::average || is_floating(tensor.dtype()),
              "allreduce: average needs a floating-point tensor, got {}", dtype_name(tensor.dtype()));
  auto comm = state_->comm;
  return run(state_, describe("allreduce", rank_, tensor), {&tensor}, false, [=](cudaStream_t stream) {
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type,
                         nccl_op(op), comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  NABLA_CHECK(root >= 0 && root < size_, "broadcast: root {} is not a rank in [0, {})", root, size_);
  auto comm = state_->comm;
  return run(state_, describe("broadcast", rank_, tensor), {&tensor}, false, [=](cudaStream_t stream) {
    return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.nbytes()),
                         ncclUint8, root, comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::allgather(Tensor& output, const Tensor& input) {
  check_tensor(output, "allgather");
  check_tensor(input, "allgather");
  NABLA_CHECK(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(),
              "allgather: output must hold world size ({}) x input numel ({}) elements of {}, got {} of {}",
              size_, input.numel(), dtype_name(input.dtype()), output.numel(), dtype_name(output.dtype()));
  auto comm = state_->comm;
  return run(state_, describe("allgather", rank_, input), {&output, &input}, false, [=](cudaStream_t stream) {
    return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.nbytes()), ncclUint8,
                         comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor(output, "reduce_scatter");
  check_tensor(input, "reduce_scatter");
  NABLA_CHECK(input.numel() == output.numel() * size_ && output.dtype() == input.dtype(),
              "reduce_scatter: input must hold world size ({}) x output numel ({}) elements, got {}", size_,
              output.numel(), input.numel());
  auto type = nccl_type(input.dtype(), "reduce_scatter");
  auto comm = state_->comm;
  return run(state_, describe("reduce_scatter", rank_, input), {&output, &input}, false,
             [=](cudaStream_t stream) {
               return ncclReduceScatter(input.data_ptr(), output.data_ptr(),
                                        static_cast<size_t>(output.numel()), type, nccl_op(op), comm, stream);
             });
}

std::shared_ptr<Work> ProcessGroupNccl::barrier() {
  // A one-element allreduce whose wait() blocks the host: a barrier is about the processes.
  Tensor token = zeros({1}, {.dtype = kInt32, .device = Device::cuda(state_->device)});
  auto comm = state_->comm;
  return run(state_, fmt::format("rank {}: barrier (nccl)", rank_), {&token}, true, [=](cudaStream_t stream) {
    return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclInt32, ncclSum, comm, stream);
  });
}

}  // namespace nabla::distributed
