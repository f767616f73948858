// The NCCL process group's collectives: each checks its tensors, builds a ticket (the NCCL call
// and the event its inputs are ready at) and hands it to the group's state
// (distributed/cuda/nccl_state.h), which launches it and watches it.
#include "nabla/distributed/process_group_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/deferred.h"
#include "nabla/core/logging.h"
#include "nabla/distributed/cuda/nccl_state.h"
#include "nabla/ops/factory.h"

namespace nabla::distributed {
namespace {

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

// Communicators created so far in this process: every rank creates its groups in the same order,
// so the count names the store key of the next group's NCCL id.
std::atomic<int> groups_created{0};

}  // namespace

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
        std::string reason =
            fmt::format("{} did not complete within {}", ticket_->what, format_seconds(timeout));
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
  flush_deferred();  // held pointwise ops (Note [Deferred launches]) write what this may read
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
  // Note [Collectives in a CUDA graph]: inside a capture the collective is launched here, on the
  // capturing thread, whatever the launch mode: the communication stream joins the capture
  // through the wait on `ready`, the collective becomes a node of the graph, and Work::wait's
  // device-side wait on `done` joins it back. The launcher thread could not take it (it polls
  // `ready`, an event of the capture), and the watchdog leaves it alone (its `done` is recorded
  // again by every replay, not by this call), so a replay's collective has no timeout of its own.
  // A Work made during a capture is for waiting on inside that capture only: its events belong to
  // the graph, so after the capture its wait() and is_completed() say nothing about a replay.
  // Collectives queued eagerly go out before each replay (an on_replay hook), so every rank
  // launches its collectives in one order. A barrier, which blocks the host, cannot be captured.
  const bool in_capture = cuda::is_capturing();
  NABLA_CHECK(!in_capture || !host_wait,
              "{}: a collective the host waits for (a barrier) cannot be captured into a CUDA graph", what);
  if (!s.launch_when_ready || in_capture) {
    if (in_capture) {
      s.flush();  // anything queued before the capture goes first, in order
      // and before each replay, so every rank's replayed collectives follow its eager ones.
      cuda::on_replay([weak = std::weak_ptr<ProcessGroupNccl::State>(state)] {
        if (auto st = weak.lock()) st->flush();
      });
    }
    // Eager: on the communication stream now, behind a device-side wait for the caller's stream.
    s.put_on_stream(*ticket, /*device_wait=*/true, /*watch=*/!in_capture);
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
