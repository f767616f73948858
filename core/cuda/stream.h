// Public header. CUDA streams and events in plain C++ (no CUDA headers needed to use them).
//
// Every kernel runs on the calling thread's current stream for its device. By default that is
// the device's default stream, a non-blocking stream nabla creates once per device (it does
// not synchronize with the legacy NULL stream). StreamGuard switches it for a scope:
//   auto side = nabla::cuda::stream_from_pool();
//   { nabla::cuda::StreamGuard guard(side); ...ops run on `side`... }
// Stream handles are cheap values that never own the stream: pool streams live for the process.
#pragma once

#include <cstdint>

namespace nabla::cuda {

class Stream {
 public:
  Stream() = default;
  Stream(void* handle, int device) : handle_(handle), device_(device) {}

  void* handle() const { return handle_; }  // a cudaStream_t
  int device() const { return device_; }
  uintptr_t id() const { return reinterpret_cast<uintptr_t>(handle_); }
  // True when all work queued so far has finished (does not wait).
  bool query() const;
  // Waits for all work queued so far. Not for the compute path.
  void synchronize() const;

  friend bool operator==(Stream a, Stream b) { return a.handle_ == b.handle_ && a.device_ == b.device_; }

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

// The calling thread's current stream on `device` (-1: the current device).
Stream current_stream(int device = -1);
// The device's default stream (non-blocking, created once).
Stream default_stream(int device = -1);
void set_current_stream(Stream stream);
// A stream from a per-device round-robin pool (for side work like copies or communication).
Stream stream_from_pool(int device = -1, bool high_priority = false);

// Makes `stream` current (on its device) for a scope, and restores the previous stream after.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// A CUDA event (move-only). Created lazily on first record, on the recording stream's device.
class Event {
 public:
  explicit Event(bool enable_timing = false) : enable_timing_(enable_timing) {}
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  void record(Stream stream);
  // Makes `stream` wait (on the device, not the host) until this event has completed.
  void block(Stream stream) const;
  bool query() const;
  void synchronize() const;
  // Milliseconds between this event and `end`; both must have been recorded with timing.
  float elapsed_ms(const Event& end) const;
  bool recorded() const { return handle_ != nullptr; }

 private:
  void* handle_ = nullptr;  // a cudaEvent_t
  int device_ = 0;
  bool enable_timing_ = false;
};

}  // namespace nabla::cuda
