#include "nabla/core/generator.h"

#include <array>

#include "nabla/core/error.h"

namespace nabla {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  state_ = {seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard lock(mutex_);
  return state_.seed;
}

PhiloxState Generator::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void Generator::set_state(PhiloxState state) {
  std::lock_guard lock(mutex_);
  state_ = state;
}

PhiloxState Generator::reserve(uint64_t blocks) {
  std::lock_guard lock(mutex_);
  PhiloxState s = state_;
  state_.offset += blocks;
  return s;
}

namespace {
constexpr int kMaxCudaDevices = 128;
struct Generators {
  Generator cpu;
  std::array<Generator, kMaxCudaDevices> cuda;
};
Generators& generators() {
  static Generators g;
  return g;
}
}  // namespace

Generator& default_generator(Device device) {
  if (device.is_cpu()) return generators().cpu;
  NABLA_CHECK(device.index >= 0 && device.index < kMaxCudaDevices, "default_generator: bad device {}",
              device.str());
  return generators().cuda[device.index];
}

void manual_seed(uint64_t seed) {
  generators().cpu.manual_seed(seed);
  for (auto& g : generators().cuda) g.manual_seed(seed);
}

}  // namespace nabla
