// Streams and events. Each device gets one default stream and a small pool of side streams,
// all created once and never destroyed (handles stay valid for the process, like PyTorch's).
#include "nabla/core/cuda/stream.h"

#include <array>
#include <atomic>
#include <mutex>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {

constexpr int kMaxDevices = 128;
constexpr int kPoolSize = 8;

struct DeviceStreams {
  std::once_flag once;
  cudaStream_t default_stream = nullptr;
  std::array<cudaStream_t, kPoolSize> pool{};
  std::array<cudaStream_t, kPoolSize> high_priority_pool{};
  std::atomic<uint32_t> next{0};
  std::atomic<uint32_t> next_high{0};
};

std::array<DeviceStreams, kMaxDevices>& all_streams() {
  static std::array<DeviceStreams, kMaxDevices> streams;
  return streams;
}

int resolve(int device) {
  return device < 0 ? current_device() : device;
}

DeviceStreams& streams_of(int device) {
  NABLA_CHECK(device >= 0 && device < device_count(),
              "CUDA device {} does not exist (this machine has {} device(s))", device, device_count());
  DeviceStreams& s = all_streams()[device];
  std::call_once(s.once, [&] {
    int previous = current_device();
    NABLA_CUDA_CHECK(cudaSetDevice(device));
    int least = 0, greatest = 0;
    NABLA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    NABLA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.default_stream, cudaStreamNonBlocking));
    for (auto& p : s.pool) NABLA_CUDA_CHECK(cudaStreamCreateWithPriority(&p, cudaStreamNonBlocking, least));
    for (auto& p : s.high_priority_pool) {
      NABLA_CUDA_CHECK(cudaStreamCreateWithPriority(&p, cudaStreamNonBlocking, greatest));
    }
    NABLA_CUDA_CHECK(cudaSetDevice(previous));
  });
  return s;
}

thread_local std::array<cudaStream_t, kMaxDevices> current_streams{};

}  // namespace

bool Stream::query() const {
  cudaError_t status = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  NABLA_CUDA_CHECK(status);
  return true;
}

void Stream::synchronize() const {
  NABLA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

Stream default_stream(int device) {
  int d = resolve(device);
  return Stream(streams_of(d).default_stream, d);
}

Stream current_stream(int device) {
  int d = resolve(device);
  cudaStream_t s = current_streams[d];
  return s ? Stream(s, d) : default_stream(d);
}

void set_current_stream(Stream stream) {
  streams_of(stream.device());  // validates the device
  current_streams[stream.device()] = static_cast<cudaStream_t>(stream.handle());
}

Stream stream_from_pool(int device, bool high_priority) {
  int d = resolve(device);
  DeviceStreams& s = streams_of(d);
  if (high_priority) return Stream(s.high_priority_pool[s.next_high++ % kPoolSize], d);
  return Stream(s.pool[s.next++ % kPoolSize], d);
}

StreamGuard::StreamGuard(Stream stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}
StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
}

Event::Event(Event&& other) noexcept {
  *this = std::move(other);
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
    enable_timing_ = other.enable_timing_;
  }
  return *this;
}

Event::~Event() {
  if (handle_) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

void Event::record(Stream stream) {
  if (!handle_) {
    device_ = stream.device();
    cudaEvent_t e = nullptr;
    NABLA_CUDA_CHECK(
        cudaEventCreateWithFlags(&e, enable_timing_ ? cudaEventDefault : cudaEventDisableTiming));
    handle_ = e;
  }
  NABLA_CHECK(stream.device() == device_,
              "Event::record: the event belongs to cuda:{}, the stream to cuda:{}", device_, stream.device());
  NABLA_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.handle())));
}

void Event::block(Stream stream) const {
  if (!handle_) return;  // never recorded: nothing to wait for
  NABLA_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), static_cast<cudaEvent_t>(handle_), 0));
}

bool Event::query() const {
  if (!handle_) return true;
  cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  NABLA_CUDA_CHECK(status);
  return true;
}

void Event::synchronize() const {
  if (handle_) NABLA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
}

float Event::elapsed_ms(const Event& end) const {
  NABLA_CHECK(handle_ && end.handle_ && enable_timing_ && end.enable_timing_,
              "Event::elapsed_ms: both events must be created with timing enabled and recorded");
  float ms = 0;
  NABLA_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_), static_cast<cudaEvent_t>(end.handle_)));
  return ms;
}

}  // namespace nabla::cuda
