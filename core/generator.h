// Public header. Generator: the seed and counter offset of a Philox stream.
//
// Random ops reserve a range of counters (offset advances by the number of 128-bit blocks they
// use), so two calls never reuse numbers and a run is reproducible from the seed alone.
//   nabla::manual_seed(0);                       // every default generator
//   nabla::Generator gen(42); auto x = nabla::rand({3}, {}, &gen);
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "nabla/core/device.h"

namespace nabla {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in 128-bit blocks
  // Set only for a CUDA kernel captured into a graph: the device address of {seed, base offset},
  // which the kernel reads and adds `offset` to, so every replay draws new numbers (Note [Random
  // numbers in CUDA graphs] in core/generator.cpp).
  const uint64_t* graph_state = nullptr;
};

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;
  explicit Generator(uint64_t seed = kDefaultSeed) : state_{seed, 0} {}

  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // Inside a CUDA graph capture (after a CUDA reserve), state() and set_state() read and move
  // the position within the captured step instead, so a checkpointed segment's recomputation
  // replays its numbers in the graph as it does eagerly.
  PhiloxState state() const;
  void set_state(PhiloxState state);
  // Returns the state to draw from and advances the offset by `blocks`. Thread-safe. A kernel
  // for `device` captured into a CUDA graph gets a state that points at device memory instead
  // (Note [Random numbers in CUDA graphs] in core/generator.cpp).
  PhiloxState reserve(uint64_t blocks, Device device = Device::cpu());

 private:
  struct Capture;
  // The record of capture `id` (created, with its replay hook, on first use), or null for id 0.
  // Called with mutex_ held.
  Capture* capture_for(uint64_t id);

  mutable std::mutex mutex_;
  PhiloxState state_;
  // The latest capture that drew from this generator. Its replay hook owns it (with its device
  // buffer), so it goes with the graph.
  std::weak_ptr<Capture> capture_;
};

// The default generator of a device (one for the CPU, one per CUDA device).
Generator& default_generator(Device device = Device::cpu());
// Seeds the CPU generator and every CUDA device's generator.
void manual_seed(uint64_t seed);

}  // namespace nabla
