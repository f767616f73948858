#include "nabla/distributed/process_group_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
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
  NcclWork(std::shared_ptr<ProcessGroupNccl::State> state, std::shared_ptr<cuda::Event> done,
           std::string what, bool host_wait)
      : state_(std::move(state)), done_(std::move(done)), what_(std::move(what)), host_wait_(host_wait) {}

  bool is_completed() override {
    std::lock_guard lock(state_->mutex);
    return state_->failed || done_->query();
  }
  void wait() override {
    if (host_wait_) return wait(state_->timeout);
    state_->check_healthy(what_);
    done_->block(cuda::current_stream(state_->device));
  }
  void wait(std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      state_->check_healthy(what_);
      if (done_->query()) return;
      if (Clock::now() > deadline) {
        std::string reason = fmt::format("{} did not complete within {}", what_, seconds(timeout));
        state_->abort(reason);
        throw CollectiveError(reason);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<ProcessGroupNccl::State> state_;
  std::shared_ptr<cuda::Event> done_;
  std::string what_;
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
}

ProcessGroupNccl::~ProcessGroupNccl() {
  auto& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    s.stopping = true;
  }
  s.wake.notify_all();
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

void ProcessGroupNccl::abort(const std::string& reason) {
  state_->abort(fmt::format("rank {}: {}", rank_, reason));
}

namespace {

// Orders the communication stream after the caller's current stream, runs `launch` on it, keeps
// the tensors' memory from being reused until the collective is done, and returns its Work.
template <typename Launch>
std::shared_ptr<Work> run(const std::shared_ptr<ProcessGroupNccl::State>& state, std::string what,
                          std::initializer_list<const Tensor*> tensors, bool host_wait, Launch&& launch) {
  auto& s = *state;
  s.check_healthy(what);
  for (const Tensor* t : tensors) {
    NABLA_CHECK(t->device() == Device::cuda(s.device),
                "{}: tensors must be on this group's device cuda:{}, got {}", what, s.device,
                t->device().str());
  }
  cuda::Event ready;
  ready.record(cuda::current_stream(s.device));
  ready.block(s.stream);
  auto stream = static_cast<cudaStream_t>(s.stream.handle());
  s.settle(launch(stream), what);
  for (const Tensor* t : tensors) cuda::record_stream(*t, s.stream);
  auto done = std::make_shared<cuda::Event>();
  done->record(s.stream);
  {
    std::lock_guard lock(s.mutex);
    s.pending.push_back({done, Clock::now(), what});
  }
  return std::make_shared<NcclWork>(state, done, std::move(what), host_wait);
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
  return run(state_, describe("allreduce", rank_, tensor), {&tensor}, false, [&](cudaStream_t stream) {
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type,
                         nccl_op(op), comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  NABLA_CHECK(root >= 0 && root < size_, "broadcast: root {} is not a rank in [0, {})", root, size_);
  auto comm = state_->comm;
  return run(state_, describe("broadcast", rank_, tensor), {&tensor}, false, [&](cudaStream_t stream) {
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
  return run(state_, describe("allgather", rank_, input), {&output, &input}, false, [&](cudaStream_t stream) {
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
             [&](cudaStream_t stream) {
               return ncclReduceScatter(input.data_ptr(), output.data_ptr(),
                                        static_cast<size_t>(output.numel()), type, nccl_op(op), comm, stream);
             });
}

std::shared_ptr<Work> ProcessGroupNccl::barrier() {
  // A one-element allreduce whose wait() blocks the host: a barrier is about the processes.
  Tensor token = zeros({1}, {.dtype = kInt32, .device = Device::cuda(state_->device)});
  auto comm = state_->comm;
  return run(state_, fmt::format("rank {}: barrier (nccl)", rank_), {&token}, true, [&](cudaStream_t stream) {
    return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclInt32, ncclSum, comm, stream);
  });
}

}  // namespace nabla::distributed
