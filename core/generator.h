// Public header. Generator: the seed and counter offset of a Philox stream.
//
// Random ops reserve a range of counters (offset advances by the number of 128-bit blocks they
// use), so two calls never reuse numbers and a run is reproducible from the seed alone.
//   nabla::manual_seed(0);                       // every default generator
//   nabla::Generator gen(42); auto x = nabla::rand({3}, {}, &gen);
#pragma once

#include <cstdint>
#include <mutex>

#include "nabla/core/device.h"

namespace nabla {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in 128-bit blocks
};

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;
  explicit Generator(uint64_t seed = kDefaultSeed) : state_{seed, 0} {}

  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  PhiloxState state() const;
  void set_state(PhiloxState state);
  // Returns the state to draw from and advances the offset by `blocks`. Thread-safe.
  PhiloxState reserve(uint64_t blocks);

 private:
  mutable std::mutex mutex_;
  PhiloxState state_;
};

// The default generator of a device (one for the CPU, one per CUDA device).
Generator& default_generator(Device device = Device::cpu());
// Seeds the CPU generator and every CUDA device's generator.
void manual_seed(uint64_t seed);

}  // namespace nabla
