#include "nabla/distributed/gloo/process_group_gloo.h"

#include <signal.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "nabla/ops/ops.h"

namespace nabla::distributed {
namespace {

// Our Store behind Gloo's rendezvous interface, so Gloo meets its peers through the TcpStore.
class GlooStore : public ::gloo::rendezvous::Store {
 public:
  explicit GlooStore(distributed::Store& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    Bytes b = store_.get(key);
    return {b.begin(), b.end()};
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  distributed::Store& store_;
};

// A collective's completion, shared by the worker thread and the caller's Work handle.
class GlooWork : public Work {
 public:
  GlooWork(std::string what, std::chrono::milliseconds timeout) : what_(std::move(what)), timeout_(timeout) {}
  bool is_completed() override {
    std::lock_guard lock(mutex_);
    return done_;
  }
  // Gloo enforces the group's timeout itself; the margin only guards against a wedged transport.
  void wait() override { wait(timeout_ + std::chrono::seconds(5)); }
  void wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
      throw CollectiveError(fmt::format("{} did not finish within {:.1f} s", what_, timeout.count() / 1e3));
    }
    if (error_) std::rethrow_exception(error_);
  }
  void finish(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// The dtypes Gloo reduces on the CPU, as a templated lambda like nabla::dispatch.
template <typename Fn>
void gloo_dispatch(DType dtype, const char* collective, Fn&& fn) {
  switch (dtype) {
    case kFloat32:
      return fn.template operator()<float>();
    case kFloat64:
      return fn.template operator()<double>();
    case kInt32:
      return fn.template operator()<int32_t>();
    case kInt64:
      return fn.template operator()<int64_t>();
    default:
      NABLA_CHECK(false, "{} (gloo): dtype {} is not supported (float32, float64, int32, int64)", collective,
                  dtype_name(dtype));
  }
}

template <typename T>
::gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  using F = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case ReduceOp::max:
      return static_cast<F>(&::gloo::max<T>);
    case ReduceOp::min:
      return static_cast<F>(&::gloo::min<T>);
    default:
      return static_cast<F>(&::gloo::sum<T>);
  }
}

std::string listen_host() {
  const char* master = std::getenv("MASTER_ADDR");
  std::string m = master ? master : "";
  if (m.empty() || m == "localhost" || m.rfind("127.", 0) == 0 || m == "::1") return "127.0.0.1";
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

struct ProcessGroupGloo::Impl {
  std::shared_ptr<::gloo::rendezvous::Context> context;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  uint32_t next_tag = 0;
  std::thread worker;

  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and everything queued has run
        job = std::move(queue.front());
        queue.pop_front();
      }
      job();
    }
  }
};

namespace {

// Gloo's TCP transport writes to its peers without MSG_NOSIGNAL, so a peer that died turns the
// next write into SIGPIPE, whose default action kills this process before Gloo can report the
// broken connection as an error (CI saw exit status 141). With SIGPIPE ignored the write fails
// with EPIPE and the collective raises CollectiveError, as a dead rank should. Only the default
// disposition is replaced: a handler the program installed is left alone.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace

ProcessGroupGloo::ProcessGroupGloo(Store& store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size, options), impl_(std::make_unique<Impl>()) {
  NABLA_CHECK(size >= 1 && rank >= 0 && rank < size,
              "ProcessGroupGloo: rank {} and world size {} must satisfy 0 <= rank < size", rank, size);
  ignore_sigpipe_unless_handled();
  ::gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("NABLA_GLOO_IFNAME"); iface && *iface) {
    attr.iface = iface;
  } else {
    attr.hostname = listen_host();
  }
  auto device = ::gloo::transport::tcp::CreateDevice(attr);
  impl_->context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
  impl_->context->setTimeout(options.timeout);
  GlooStore gloo_store(store);
  try {
    impl_->context->connectFullMesh(gloo_store, device);
  } catch (const ::gloo::Exception& e) {
    throw CollectiveError(
        fmt::format("rank {}: gloo could not connect to the other {} ranks: {}", rank, size - 1, e.what()));
  }
  impl_->worker = std::thread([impl = impl_.get()] { impl->run(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

namespace {
// Queues `body` on the group's worker; its exceptions become the Work's error, named.
std::shared_ptr<Work> enqueue(ProcessGroupGloo::Impl& impl, int rank, const char* collective,
                              std::chrono::milliseconds timeout, std::function<void(uint32_t tag)> body) {
  auto work = std::make_shared<GlooWork>(fmt::format("rank {}: {} (gloo)", rank, collective), timeout);
  std::lock_guard lock(impl.mutex);
  uint32_t tag = impl.next_tag++;
  impl.queue.push_back([work, body = std::move(body), tag, timeout] {
    try {
      body(tag);
      work->finish(nullptr);
    } catch (const ::gloo::IoException& e) {
      work->finish(std::make_exception_ptr(CollectiveError(
          fmt::format("{} failed or timed out (timeout {:.1f} s); a peer rank may have died or hung: {}",
                      work->what(), timeout.count() / 1e3, e.what()))));
    } catch (const ::gloo::Exception& e) {
      work->finish(std::make_exception_ptr(CollectiveError(work->what() + " failed: " + e.what())));
    } catch (...) {
      work->finish(std::current_exception());
    }
  });
  impl.cv.notify_one();
  return work;
}
}  // namespace

std::shared_ptr<Work> ProcessGroupGloo::allreduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  NABLA_CHECK(tensor.device().is_cpu(), "allreduce (gloo): tensors must be on the CPU, got {}",
              tensor.device().str());
  Tensor t = tensor;
  auto context = impl_->context;
  int world = size_;
  auto timeout = options_.timeout;
  return enqueue(*impl_, rank_, "allreduce", timeout, [t, op, context, world, timeout](uint32_t tag) mutable {
    gloo_dispatch(t.dtype(), "allreduce", [&]<typename T>() {
      ::gloo::AllreduceOptions opts(context);
      opts.setOutput(t.data_ptr<T>(), static_cast<size_t>(t.numel()));
      opts.setReduceFunction(reduce_function<T>(op));
      opts.setTag(tag);
      opts.setTimeout(timeout);
      ::gloo::allreduce(opts);
      if (op == ReduceOp::average) {
        T* p = t.data_ptr<T>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(world));
      }
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  NABLA_CHECK(root >= 0 && root < size_, "broadcast: root {} is not a rank in [0, {})", root, size_);
  Tensor t = tensor;
  auto context = impl_->context;
  auto timeout = options_.timeout;
  return enqueue(*impl_, rank_, "broadcast", timeout, [t, root, context, timeout](uint32_t tag) {
    ::gloo::BroadcastOptions opts(context);
    opts.setOutput(static_cast<uint8_t*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::broadcast(opts);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::allgather(Tensor& output, const Tensor& input) {
  check_tensor(output, "allgather");
  check_tensor(input, "allgather");
  NABLA_CHECK(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(),
              "allgather: output must hold world size ({}) x input numel ({}) elements of {}, got {} of {}",
              size_, input.numel(), dtype_name(input.dtype()), output.numel(), dtype_name(output.dtype()));
  Tensor in = input, out = output;
  auto context = impl_->context;
  auto timeout = options_.timeout;
  return enqueue(*impl_, rank_, "allgather", timeout, [in, out, context, timeout](uint32_t tag) {
    ::gloo::AllgatherOptions opts(context);
    opts.setInput(static_cast<uint8_t*>(in.data_ptr()), static_cast<size_t>(in.nbytes()));
    opts.setOutput(static_cast<uint8_t*>(out.data_ptr()), static_cast<size_t>(out.nbytes()));
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::allgather(opts);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor(output, "reduce_scatter");
  check_tensor(input, "reduce_scatter");
  NABLA_CHECK(input.numel() == output.numel() * size_ && output.dtype() == input.dtype(),
              "reduce_scatter: input must hold world size ({}) x output numel ({}) elements, got {}", size_,
              output.numel(), input.numel());
  // Gloo has no general reduce-scatter for unbound buffers: allreduce a copy and keep our chunk.
  // It moves size() times more data than a ring reduce-scatter, which is fine for the CPU
  // backend's role (tests and small jobs).
  Tensor scratch = input.clone();
  Tensor out = output;
  int r = rank_;
  auto inner = allreduce(scratch, op);
  return enqueue(*impl_, rank_, "reduce_scatter", options_.timeout, [inner, scratch, out, r](uint32_t) {
    inner->wait();
    std::memcpy(out.data_ptr(), static_cast<const uint8_t*>(scratch.data_ptr()) + r * out.nbytes(),
                static_cast<size_t>(out.nbytes()));
  });
}

std::shared_ptr<Work> ProcessGroupGloo::barrier() {
  auto context = impl_->context;
  auto timeout = options_.timeout;
  return enqueue(*impl_, rank_, "barrier", timeout, [context, timeout](uint32_t tag) {
    ::gloo::BarrierOptions opts(context);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::barrier(opts);
  });
}

}  // namespace nabla::distributed
