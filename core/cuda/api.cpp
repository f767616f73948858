// The public CUDA runtime API (runtime.h, stream.h, memory.h, pinned_allocator.h, graph.h),
// compiled in every build. Without CUDA each function gives its no-device answer or raises
// built_without_cuda(); with CUDA it calls the backend. Note [The runtime's two sides] in
// detail/backend.h.
#include <atomic>
#include <utility>

#include "nabla/core/cuda/detail/backend.h"
#include "nabla/core/cuda/device_checks.h"
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/pinned_allocator.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/deferred.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

// --- Devices and copies. -------------------------------------------------------------------------

int device_count() {
  if constexpr (kHasCuda)
    return backend::device_count();
  else
    return 0;
}
bool is_available() {
  return device_count() > 0;
}
int current_device() {
  if constexpr (kHasCuda)
    return backend::current_device();
  else
    built_without_cuda("cuda::current_device");
}
void set_device(int index) {
  if constexpr (kHasCuda)
    backend::set_device(index);
  else
    built_without_cuda("cuda::set_device");
}
void synchronize() {
  flush_deferred();  // Note [Deferred launches]: held pointwise ops run before anything waits
  note_host_wait("a device synchronization (cuda::synchronize)");
  if constexpr (kHasCuda)
    backend::synchronize();
  else
    built_without_cuda("cuda::synchronize");
  raise_failed_device_checks();  // Note [Checks on the device]
}
Allocator& device_allocator(int index) {
  if constexpr (kHasCuda)
    return backend::device_allocator(index);
  else
    built_without_cuda("CUDA tensor allocation");
}
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  flush_deferred();
  if (dst_device.is_cpu() && src_device.is_cuda())
    note_host_wait("a copy from the GPU to the host (item(), cpu())");
  NABLA_CHECK(
      !(src_device.is_cpu() && dst_device.is_cuda() && is_capturing()),
      "a copy from host memory to the GPU cannot be captured into a CUDA graph: every replay would copy "
      "whatever that host memory holds then (and a temporary host buffer is gone). Copy before the "
      "capture, or write per-step values from a replay hook (cuda::on_replay)");
  if constexpr (kHasCuda)
    backend::copy_bytes(dst, dst_device, src, src_device, nbytes);
  else
    built_without_cuda("a copy to or from a CUDA device");
  if (dst_device.is_cpu()) raise_failed_device_checks();
}
void memset_zero(void* dst, Device device, size_t nbytes) {
  flush_deferred();
  if constexpr (kHasCuda)
    backend::memset_zero(dst, device, nbytes);
  else
    built_without_cuda("memset on a CUDA device");
}

// --- Streams. ------------------------------------------------------------------------------------

bool Stream::query() const {
  if constexpr (kHasCuda)
    return backend::stream_query(*this);
  else
    built_without_cuda("cuda::Stream::query");
}
void Stream::synchronize() const {
  flush_deferred();
  note_host_wait("a stream synchronization");
  if constexpr (kHasCuda)
    backend::stream_synchronize(*this);
  else
    built_without_cuda("cuda::Stream::synchronize");
  raise_failed_device_checks();
}
Stream current_stream(int device) {
  if constexpr (kHasCuda)
    return backend::current_stream(device);
  else
    built_without_cuda("cuda::current_stream");
}
Stream default_stream(int device) {
  if constexpr (kHasCuda)
    return backend::default_stream(device);
  else
    built_without_cuda("cuda::default_stream");
}
void set_current_stream(Stream stream) {
  if constexpr (kHasCuda)
    backend::set_current_stream(stream);
  else
    built_without_cuda("cuda::set_current_stream");
}
Stream stream_from_pool(int device, bool high_priority) {
  if constexpr (kHasCuda)
    return backend::stream_from_pool(device, high_priority);
  else
    built_without_cuda("cuda::stream_from_pool");
}

StreamGuard::StreamGuard(Stream stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}
StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
}

// --- Events. An event is created on its first record, so without CUDA none ever exists: record
// raises, and everything else sees an event that was never recorded. ---------------------------------

Event::Event(Event&& other) noexcept {
  *this = std::move(other);
}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if constexpr (kHasCuda) {
      if (handle_) backend::event_destroy(handle_);
    }
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
    enable_timing_ = other.enable_timing_;
  }
  return *this;
}
Event::~Event() {
  if constexpr (kHasCuda) {
    if (handle_) backend::event_destroy(handle_);
  }
}
void Event::record(Stream stream) {
  flush_deferred();
  if constexpr (kHasCuda) {
    if (!handle_) {
      // An event belongs to the device current at its creation: make that the stream's.
      device_ = stream.device();
      const int previous = backend::current_device();
      if (previous != device_) backend::set_device(device_);
      try {
        handle_ = backend::event_create(enable_timing_);
      } catch (...) {
        if (previous != device_) backend::set_device(previous);
        throw;
      }
      if (previous != device_) backend::set_device(previous);
    }
    NABLA_CHECK(stream.device() == device_,
                "Event::record: the event belongs to cuda:{}, the stream to cuda:{}", device_,
                stream.device());
    backend::event_record(handle_, stream);
  } else {
    built_without_cuda("cuda::Event::record");
  }
}
void Event::block(Stream stream) const {
  if constexpr (kHasCuda) {
    if (handle_) backend::stream_wait_event(stream, handle_);  // never recorded: nothing to wait for
  }
}
bool Event::query() const {
  if constexpr (kHasCuda)
    return !handle_ || backend::event_query(handle_);
  else
    return true;
}
void Event::synchronize() const {
  note_host_wait("an event synchronization");
  if constexpr (kHasCuda) {
    if (handle_) backend::event_synchronize(handle_);
  }
  raise_failed_device_checks();
}
float Event::elapsed_ms(const Event& end) const {
  NABLA_CHECK(handle_ && end.handle_ && enable_timing_ && end.enable_timing_,
              "Event::elapsed_ms: both events must be created with timing enabled and recorded");
  if constexpr (kHasCuda)
    return backend::event_elapsed_ms(handle_, end.handle_);
  else
    built_without_cuda("cuda::Event::elapsed_ms");
}

// --- Device memory. Without CUDA no device holds any. ----------------------------------------------

size_t memory_allocated(int device) {
  if constexpr (kHasCuda)
    return backend::memory_allocated(device);
  else
    return 0;
}
size_t max_memory_allocated(int device) {
  if constexpr (kHasCuda)
    return backend::max_memory_allocated(device);
  else
    return 0;
}
size_t memory_reserved(int device) {
  if constexpr (kHasCuda)
    return backend::memory_reserved(device);
  else
    return 0;
}
size_t max_memory_reserved(int device) {
  if constexpr (kHasCuda)
    return backend::max_memory_reserved(device);
  else
    return 0;
}
void reset_peak_memory_stats(int device) {
  if constexpr (kHasCuda) backend::reset_peak_memory_stats(device);
}
AllocatorCounts allocator_counts(int device) {
  if constexpr (kHasCuda)
    return backend::allocator_counts(device);
  else
    return {};
}
void empty_cache() {
  if constexpr (kHasCuda) backend::empty_cache();
}
void set_memory_fraction(double fraction, int device) {
  if constexpr (kHasCuda)
    backend::set_memory_fraction(fraction, device);
  else
    built_without_cuda("cuda::set_memory_fraction");
}
std::string allocator_backend() {
  if constexpr (kHasCuda)
    return backend::allocator_backend();
  else
    return "none (built without CUDA)";
}
std::string memory_summary(int device) {
  if constexpr (kHasCuda)
    return backend::memory_summary(device);
  else
    return "nabla was built without CUDA\n";
}
std::string memory_snapshot(int device) {
  if constexpr (kHasCuda)
    return backend::memory_snapshot(device);
  else
    return "{\"segments\": []}";
}
void record_stream(const Tensor& t, Stream stream) {
  NABLA_CHECK(t.is_cuda(), "record_stream: expected a CUDA tensor, got {}", describe(t));
  if constexpr (kHasCuda) backend::record_stream(t, stream);
}

// --- Pinned host memory. Without CUDA nothing is pinned. --------------------------------------------

Allocator& pinned_allocator() {
  if constexpr (kHasCuda)
    return backend::pinned_allocator();
  else
    built_without_cuda("pinned host memory");
}
bool is_pinned(const void* ptr) {
  if constexpr (kHasCuda)
    return backend::is_pinned(ptr);
  else
    return false;
}
void record_pinned_use(const void* ptr, Stream stream) {
  if constexpr (kHasCuda) backend::record_pinned_use(ptr, stream);
}
PinnedStats pinned_stats() {
  if constexpr (kHasCuda)
    return backend::pinned_stats();
  else
    return {};
}
void pinned_empty_cache() {
  if constexpr (kHasCuda) backend::pinned_empty_cache();
}

// --- Graphs. -------------------------------------------------------------------------------------

namespace {
[[maybe_unused]] std::atomic<uint64_t> next_pool{1};  // only the CUDA branch below reads it
thread_local Graph* capturing_graph = nullptr;        // the graph this thread is capturing
thread_local uint64_t capturing_id = 0;
thread_local HostWaitCounter* innermost_counter = nullptr;
}  // namespace

Graph::~Graph() {
  try {
    reset();
  } catch (...) {  // destructors must not throw; reset only fails on a broken context
  }
}

void Graph::capture_begin(Stream stream) {
  flush_deferred();  // held ops run now, not inside the graph (Note [Deferred launches])
  NABLA_CHECK(!capturing_ && !exec_,
              "Graph::capture_begin: this graph already holds a capture; call reset() first");
  NABLA_CHECK(stream.handle() != nullptr, "Graph::capture_begin: the legacy NULL stream cannot be captured");
  NABLA_CHECK(capturing_graph == nullptr,
              "Graph::capture_begin: this thread is already capturing another graph; captures do not nest");
  if constexpr (kHasCuda) {
    stream_ = stream;
    pool_ = next_pool.fetch_add(1);
    backend::begin_capture(stream, pool_);
    capturing_ = true;
    capturing_graph = this;
    capturing_id = pool_;
  } else {
    built_without_cuda("cuda::Graph::capture_begin");
  }
}

void Graph::capture_end() {
  NABLA_CHECK(capturing_, "Graph::capture_end: no capture in progress");
  flush_deferred();
  capturing_ = false;
  capturing_graph = nullptr;
  capturing_id = 0;
  if constexpr (kHasCuda) {
    backend::CapturedGraph captured = backend::end_capture(stream_, pool_);
    graph_ = captured.graph;
    exec_ = captured.exec;
  }
}

void Graph::replay() {
  replay(stream_);
}

void Graph::replay(Stream stream) {
  flush_deferred();  // held ops read what the replay may overwrite
  NABLA_CHECK(exec_ != nullptr, "Graph::replay: nothing was captured");
  NABLA_CHECK(stream.device() == stream_.device(), "Graph::replay: captured on cuda:{}, replayed on cuda:{}",
              stream_.device(), stream.device());
  StreamGuard guard(stream);
  // Checks first: one that fails leaves every hook's state (counters, offsets) untouched.
  for (const auto& check : checks_) check();
  for (const auto& hook : hooks_) hook();
  if constexpr (kHasCuda) backend::launch({graph_, exec_}, stream);
  replayed_ = true;
  last_replay_stream_ = stream;
}

void Graph::reset() {
  if constexpr (kHasCuda) {
    if (capturing_) {
      backend::abort_capture(stream_, pool_);
      capturing_ = false;
      capturing_graph = nullptr;
      capturing_id = 0;
    }
    // The hooks hold device buffers that replays read (allocate_outside_capture, which the
    // allocator does not know the graph uses), and the pool below is released in the capture
    // stream's order: wait for the last replay, which may have run on another stream.
    if (exec_ != nullptr && replayed_) backend::stream_synchronize(last_replay_stream_);
    hooks_.clear();
    checks_.clear();
    backend::destroy({graph_, exec_});
    exec_ = graph_ = nullptr;
    if (pool_) {
      // Replays may still run: the pool's blocks are released once the stream is past them.
      backend::release_graph_pool(stream_.device(), pool_, stream_);
      pool_ = 0;
    }
  }
  hooks_.clear();
  checks_.clear();
  replayed_ = false;
}

bool is_capturing() {
  return capturing_graph != nullptr;
}

Stream stream_outside_capture(int device) {
  // The pool has several streams: one of them is not the capturing one.
  Stream side = stream_from_pool(device);
  for (int tries = 0; capturing_graph != nullptr && side == capturing_graph->stream_ && tries < 64; ++tries)
    side = stream_from_pool(device);
  NABLA_ASSERT(capturing_graph == nullptr || !(side == capturing_graph->stream_));
  return side;
}

DataPtr allocate_outside_capture(int device, size_t nbytes) {
  const StreamGuard side(stream_outside_capture(device));  // the shared pools, not the graph's
  return device_allocator(device).allocate(nbytes);
}

uint64_t capture_id() {
  return capturing_id;
}

void on_replay(std::function<void()> hook) {
  NABLA_CHECK(capturing_graph != nullptr, "cuda::on_replay: no graph is being captured on this thread");
  capturing_graph->hooks_.push_back(std::move(hook));
}

void on_replay_check(std::function<void()> check) {
  NABLA_CHECK(capturing_graph != nullptr, "cuda::on_replay_check: no graph is being captured on this thread");
  capturing_graph->checks_.push_back(std::move(check));
}

HostWaitCounter::HostWaitCounter() : outer_(innermost_counter) {
  innermost_counter = this;
}

HostWaitCounter::~HostWaitCounter() {
  innermost_counter = outer_;
}

void note_host_wait(const char* what) {
  for (HostWaitCounter* c = innermost_counter; c != nullptr; c = c->outer_) {
    if (c->count_++ == 0) c->first_ = what;
  }
}

}  // namespace nabla::cuda
