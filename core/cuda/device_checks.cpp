// Failed-check records written by kernels and raised by the host (device_checks.h).
#include "nabla/core/cuda/device_checks.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "nabla/core/cuda/detail/backend.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {

struct Messages {
  std::mutex mutex;
  std::vector<std::string> texts;
  std::unordered_map<std::string, int> ids;
};

Messages& messages() {
  static auto* m = new Messages();  // leaked on purpose: read by whichever static dies last
  return *m;
}

// Set once the record exists, for raise_failed_device_checks to read without creating it.
std::atomic<DeviceCheckRecord*> t_record{nullptr};

}  // namespace

int register_device_check(const std::string& message) {
  Messages& m = messages();
  std::lock_guard lock(m.mutex);
  auto [it, added] = m.ids.try_emplace(message, static_cast<int>(m.texts.size()));
  if (added) m.texts.push_back(message);
  return it->second;
}

DeviceCheckRecord* device_check_record() {
  if constexpr (kHasCuda) {
    static DeviceCheckRecord* const record = [] {
      auto* r = static_cast<DeviceCheckRecord*>(backend::alloc_mapped_host(sizeof(DeviceCheckRecord)));
      t_record.store(r, std::memory_order_release);
      return r;
    }();
    return record;
  } else {
    return nullptr;
  }
}

void raise_failed_device_checks() {
  // Nothing to read until some op has made the record; then one read of host memory per wait.
  DeviceCheckRecord* r = t_record.load(std::memory_order_acquire);
  if (r == nullptr) return;
  volatile DeviceCheckRecord* v = r;
  if (v->failed == 0) return;
  const int check = v->check;
  const long long value = v->value;
  v->failed = 0;
  std::string message;
  {
    Messages& m = messages();
    std::lock_guard lock(m.mutex);
    message = check >= 0 && static_cast<size_t>(check) < m.texts.size()
                  ? fmt::format(fmt::runtime(m.texts[static_cast<size_t>(check)]), value)
                  : fmt::format("a device-side check (id {}) failed on value {}", check, value);
  }
  NABLA_CHECK(false,
              "{} (found on the device by a kernel; reported at the next wait for the device, so the "
              "step that read it ran with zeros in its place)",
              message);
}

}  // namespace nabla::cuda
