// The device runtime of a build without CUDA (-DNABLA_CUDA=OFF): no devices, and a clear error
// for anything that needs one.
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/pinned_allocator.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/error.h"
#include "nabla/core/memory_category.h"

#include <utility>

namespace nabla::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  NABLA_CHECK(false,
              "{}: nabla was built without CUDA (configure with -DNABLA_CUDA=ON on a machine with the CUDA "
              "toolkit); use Device::cpu()",
              what);
  __builtin_unreachable();
}
}  // namespace

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
int current_device() {
  no_cuda("current_device");
}
void set_device(int) {
  no_cuda("set_device");
}
void synchronize() {
  no_cuda("synchronize");
}
Allocator& device_allocator(int) {
  no_cuda("CUDA tensor allocation");
}
void copy_bytes(void*, Device, const void*, Device, size_t) {
  no_cuda("copy to or from a CUDA device");
}
void memset_zero(void*, Device, size_t) {
  no_cuda("memset on a CUDA device");
}

Allocator& pinned_allocator() {
  no_cuda("pinned memory");
}
bool is_pinned(const void*) {
  return false;
}
void record_pinned_use(const void*, Stream) {}
PinnedStats pinned_stats() {
  return {};
}
void pinned_empty_cache() {}

bool Stream::query() const {
  no_cuda("Stream::query");
}
void Stream::synchronize() const {
  no_cuda("Stream::synchronize");
}
Stream current_stream(int) {
  no_cuda("current_stream");
}
Stream default_stream(int) {
  no_cuda("default_stream");
}
void set_current_stream(Stream) {
  no_cuda("set_current_stream");
}
Stream stream_from_pool(int, bool) {
  no_cuda("stream_from_pool");
}
StreamGuard::StreamGuard(Stream) {
  no_cuda("StreamGuard");
}
StreamGuard::~StreamGuard() = default;
Event::Event(Event&& other) noexcept {
  *this = std::move(other);
}
Event& Event::operator=(Event&& other) noexcept {
  handle_ = std::exchange(other.handle_, nullptr);
  return *this;
}
Event::~Event() = default;
void Event::record(Stream) {
  no_cuda("Event::record");
}
void Event::block(Stream) const {
  no_cuda("Event::block");
}
bool Event::query() const {
  return true;
}
void Event::synchronize() const {}
float Event::elapsed_ms(const Event&) const {
  no_cuda("Event::elapsed_ms");
}

size_t memory_allocated(int) {
  return 0;
}
size_t max_memory_allocated(int) {
  return 0;
}
size_t memory_reserved(int) {
  return 0;
}
size_t max_memory_reserved(int) {
  return 0;
}
void reset_peak_memory_stats(int) {}
AllocatorCounts allocator_counts(int) {
  return {};
}
void empty_cache() {}
void set_memory_fraction(double, int) {
  no_cuda("set_memory_fraction");
}
std::string allocator_backend() {
  return "none (built without CUDA)";
}
std::string memory_summary(int) {
  return "nabla was built without CUDA\n";
}
std::string memory_snapshot(int) {
  return "{\"segments\": []}";
}
void record_stream(const Tensor&, Stream) {
  no_cuda("record_stream");
}
namespace detail {
MemoryCategoryStats memory_category_stats(int) {
  no_cuda("memory_category_stats");
}
}  // namespace detail

Graph::~Graph() = default;
void Graph::capture_begin(Stream) {
  no_cuda("Graph::capture_begin");
}
void Graph::capture_end() {
  no_cuda("Graph::capture_end");
}
void Graph::replay() {
  no_cuda("Graph::replay");
}
void Graph::reset() {}

}  // namespace nabla::cuda
