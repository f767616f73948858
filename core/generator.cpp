#include "nabla/core/generator.h"

#include <array>
#include <functional>

#include "nabla/core/allocator.h"
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla {

// Note [Random numbers in CUDA graphs]
// A captured kernel keeps its launch arguments, so a Philox seed and offset passed by value
// would give every replay the same numbers. In a capture, reserve() therefore hands out offsets
// relative to the captured step (0, then the blocks of each draw) together with the address of
// a 16-byte device buffer {seed, base}, which the kernels add to (ops/cuda/elementwise/random.cu). A replay
// hook (cuda::on_replay) writes the generator's current seed and offset into it before each replay and
// advances the host offset by the blocks the step draws, exactly as the eager step would have: a graphed step
// draws the same numbers as the eager step it replaces, and a different set every replay. The buffer is not
// from the graph's pool (cuda::allocate_outside_capture): the pool could give it a block an earlier captured
// kernel writes as scratch, after the hook and before the draw.
struct Generator::Capture {
  uint64_t id = 0;
  Device device;
  DataPtr state;        // {seed, base offset} on the device (allocated by the first CUDA draw)
  uint64_t blocks = 0;  // drawn so far in the captured step
};

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  state_ = {seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard lock(mutex_);
  return state_.seed;
}

Generator::Capture* Generator::capture_for(uint64_t id) {
  if (id == 0) return nullptr;
  auto capture = capture_.lock();  // the graph under capture holds it, so it outlives this call
  if (capture && capture->id == id) return capture.get();
  // The first use in this capture (a draw, or a checkpoint saving the position before one).
  capture = std::make_shared<Capture>();
  capture->id = id;
  // Before each replay: this replay's seed and base, then the host offset moves past the blocks
  // the step draws. The hook owns the capture (and its buffer), so both go with the graph.
  cuda::on_replay([this, capture] {
    uint64_t values[2];
    {
      std::lock_guard lock(mutex_);
      values[0] = state_.seed;
      values[1] = state_.offset;
      state_.offset += capture->blocks;
    }
    if (capture->state.get() != nullptr)
      cuda::copy_bytes(capture->state.get(), capture->device, values, Device::cpu(), sizeof(values));
  });
  capture_ = capture;
  return capture.get();
}

PhiloxState Generator::state() const {
  std::lock_guard lock(mutex_);
  if (Capture* c = const_cast<Generator*>(this)->capture_for(cuda::capture_id()))
    return {state_.seed, c->blocks};
  return state_;
}

void Generator::set_state(PhiloxState state) {
  std::lock_guard lock(mutex_);
  if (Capture* c = capture_for(cuda::capture_id())) {
    NABLA_CHECK(state.seed == state_.seed,
                "Generator::set_state: a CUDA graph capture cannot change the seed (from {} to {})",
                state_.seed, state.seed);
    c->blocks = state.offset;
    return;
  }
  state_ = state;
}

PhiloxState Generator::reserve(uint64_t blocks, Device device) {
  std::lock_guard lock(mutex_);
  Capture* c = device.is_cuda() ? capture_for(cuda::capture_id()) : nullptr;
  if (c == nullptr) {
    PhiloxState s = state_;
    state_.offset += blocks;
    return s;
  }
  if (c->state.get() == nullptr) {
    c->device = device;
    c->state = cuda::allocate_outside_capture(device.index, 2 * sizeof(uint64_t));
  }
  NABLA_CHECK(c->device == device, "Generator: one capture draws for {} and {}; use one generator per device",
              c->device.str(), device.str());
  PhiloxState s{state_.seed, c->blocks, static_cast<const uint64_t*>(c->state.get())};
  c->blocks += blocks;
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
  // As int: an int8_t index is under the bound by type today (clang warns); kept if either changes.
  const int index = device.index;
  NABLA_CHECK(index >= 0 && index < kMaxCudaDevices, "default_generator: bad device {}", device.str());
  return generators().cuda[index];
}

void manual_seed(uint64_t seed) {
  generators().cpu.manual_seed(seed);
  for (auto& g : generators().cuda) g.manual_seed(seed);
}

}  // namespace nabla
