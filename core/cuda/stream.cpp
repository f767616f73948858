// The CUDA side of streams and events (detail/backend.h). Each device gets one default stream and a small
// pool of side streams, all created once and never destroyed (handles stay valid for the process, like
// PyTorch's).
#include <array>
#include <atomic>
#include <mutex>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/detail/backend.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/error.h"

namespace nabla::cuda::backend {

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

DeviceStreams& streams_of(int device) {
  DeviceStreams& s = all_streams()[device];
  std::call_once(s.once, [&] {
    DeviceGuard guard(device);
    int least = 0, greatest = 0;
    NABLA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    NABLA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.default_stream, cudaStreamNonBlocking));
    for (auto& p : s.pool) NABLA_CUDA_CHECK(cudaStreamCreateWithPriority(&p, cudaStreamNonBlocking, least));
    for (auto& p : s.high_priority_pool) {
      NABLA_CUDA_CHECK(cudaStreamCreateWithPriority(&p, cudaStreamNonBlocking, greatest));
    }
  });
  return s;
}

thread_local std::array<cudaStream_t, kMaxDevices> current_streams{};

// cudaErrorNotReady is an answer, not a failure: clear it so that the next check does not see it.
bool ready(cudaError_t status) {
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  NABLA_CUDA_CHECK(status);
  return true;
}
}  // namespace

bool stream_query(Stream stream) {
  return ready(cudaStreamQuery(static_cast<cudaStream_t>(stream.handle())));
}

void stream_synchronize(Stream stream) {
  NABLA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle())));
}

Stream default_stream(int device) {
  int d = checked_device(device);
  return Stream(streams_of(d).default_stream, d);
}

Stream current_stream(int device) {
  int d = checked_device(device);
  cudaStream_t s = current_streams[d];
  return s ? Stream(s, d) : default_stream(d);
}

void set_current_stream(Stream stream) {
  streams_of(checked_device(stream.device()));  // validates the device
  current_streams[stream.device()] = static_cast<cudaStream_t>(stream.handle());
}

Stream stream_from_pool(int device, bool high_priority) {
  int d = checked_device(device);
  DeviceStreams& s = streams_of(d);
  if (high_priority) return Stream(s.high_priority_pool[s.next_high++ % kPoolSize], d);
  return Stream(s.pool[s.next++ % kPoolSize], d);
}

void* event_create(bool enable_timing) {
  cudaEvent_t e = nullptr;
  NABLA_CUDA_CHECK(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event) {
  cudaEventDestroy(static_cast<cudaEvent_t>(event));  // teardown: a broken context is not an error here
}

void event_record(void* event, Stream stream) {
  NABLA_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream.handle())));
}

void stream_wait_event(Stream stream, void* event) {
  NABLA_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), static_cast<cudaEvent_t>(event), 0));
}

bool event_query(void* event) {
  return ready(cudaEventQuery(static_cast<cudaEvent_t>(event)));
}

void event_synchronize(void* event) {
  NABLA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  NABLA_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

}  // namespace nabla::cuda::backend
