// The capacity-limited CPU allocator (set_cpu_memory_limit): the injected out-of-memory that CI
// uses to test the OOM-split policy and the automatic batch size without a GPU.
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "nabla/core/cpu_memory.h"
#include "test_util.h"

namespace nabla {
namespace {

// Lifts the limit when the test ends, whatever happens, so that no other test inherits it.
struct LimitGuard {
  explicit LimitGuard(size_t bytes) { set_cpu_memory_limit(bytes); }
  ~LimitGuard() { set_cpu_memory_limit(0); }
};

std::string oom_message_of(size_t bytes) {
  try {
    DataPtr p = cpu_allocator().allocate(bytes);
  } catch (const OutOfMemoryError& e) {
    return e.what();
  }
  ADD_FAILURE() << "allocating " << bytes << " bytes did not throw OutOfMemoryError";
  return "";
}

TEST(CpuMemoryLimit, AllocationsUpToTheLimitSucceedAndOneByteMoreThrows) {
  std::mt19937_64 rng(testing::test_seed());
  const size_t base = cpu_memory_allocated();
  const size_t room = 1000 + rng() % 5000;
  LimitGuard guard(base + room);
  EXPECT_EQ(cpu_memory_limit(), base + room);
  const size_t first = 1 + rng() % (room - 1);
  DataPtr a = cpu_allocator().allocate(first);
  DataPtr b = cpu_allocator().allocate(room - first);  // exactly at the limit: allowed
  EXPECT_NE(a.get(), nullptr);
  EXPECT_NE(b.get(), nullptr);
  EXPECT_EQ(cpu_memory_allocated(), base + room);
  EXPECT_THROW(cpu_allocator().allocate(1), OutOfMemoryError);
  EXPECT_EQ(cpu_memory_allocated(), base + room) << "a refused allocation must not stay counted";
  b.reset();
  DataPtr c = cpu_allocator().allocate(room - first);  // the freed bytes are available again
  EXPECT_EQ(cpu_memory_allocated(), base + room);
}

TEST(CpuMemoryLimit, ErrorNamesRequestedAllocatedLimitAndHowToLiftIt) {
  std::mt19937_64 rng(testing::test_seed());
  const size_t base = cpu_memory_allocated();
  const size_t limit = base + 4096 + rng() % 4096;
  LimitGuard guard(limit);
  const size_t held_bytes = 1000 + rng() % 1000;
  DataPtr held = cpu_allocator().allocate(held_bytes);
  const size_t request = limit - base;  // over by held_bytes
  std::string message = oom_message_of(request);
  for (const std::string& fragment : std::vector<std::string>{
           fmt::format("tried to allocate {} bytes", request),
           fmt::format("{} bytes allocated", base + held_bytes), fmt::format("limit of {} bytes", limit),
           std::string("set_cpu_memory_limit(0)")}) {
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "\"" << message << "\" lacks \"" << fragment << "\"";
  }
}

TEST(CpuMemoryLimit, ZeroLiftsTheLimitAndALowerLimitLeavesExistingMemoryAlone) {
  const size_t base = cpu_memory_allocated();
  LimitGuard guard(base + 256);
  EXPECT_THROW(Tensor::empty({1024}, {.dtype = kFloat32}), OutOfMemoryError);  // 4 KiB
  set_cpu_memory_limit(0);
  EXPECT_EQ(cpu_memory_limit(), 0u);
  Tensor t = Tensor::empty({1024}, {.dtype = kFloat32});
  EXPECT_EQ(cpu_memory_allocated(), base + 4096);
  // A limit below what is held refuses new memory but leaves the held memory alone; freeing works.
  set_cpu_memory_limit(base + 100);
  EXPECT_EQ(cpu_memory_allocated(), base + 4096);
  EXPECT_THROW(Tensor::empty({16}, {.dtype = kFloat32}), OutOfMemoryError);
  EXPECT_THROW(t + 1.0, OutOfMemoryError);
  t = Tensor();
  EXPECT_EQ(cpu_memory_allocated(), base);
  Tensor small = Tensor::empty({16}, {.dtype = kFloat32});  // 64 bytes fit under base + 100
  EXPECT_EQ(cpu_memory_allocated(), base + 64);
}

TEST(CpuMemoryLimit, ConcurrentAllocationsNeverPassTheLimit) {
  constexpr int kThreads = 8, kRounds = 2000;
  constexpr size_t kChunk = 1000;
  const size_t base = cpu_memory_allocated();
  LimitGuard guard(base + 3 * kChunk + kChunk / 2);  // room for three chunks at a time
  cpu_reset_peak_memory_stats();
  std::atomic<int> granted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        try {
          DataPtr p = cpu_allocator().allocate(kChunk);
          static_cast<char*>(p.get())[kChunk - 1] = 1;  // the memory is real
          ++granted;
        } catch (const OutOfMemoryError&) {
          ++refused;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(granted + refused, kThreads * kRounds);
  EXPECT_GT(granted.load(), 0);
  EXPECT_LE(cpu_max_memory_allocated(), base + 3 * kChunk) << "the limit was passed under contention";
  EXPECT_EQ(cpu_memory_allocated(), base);
}

}  // namespace
}  // namespace nabla
