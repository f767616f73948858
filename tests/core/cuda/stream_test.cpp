// Streams, events and pinned memory on the GPU (each case skips without a GPU).
#include <thread>

#include "nabla/core/cuda/pinned_allocator.h"
#include "nabla/core/cuda/stream.h"
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaStream, GuardSwitchesTheCurrentStreamPerThreadAndRestoresIt) {
  SKIP_WITHOUT_GPU();
  cuda::Stream base = cuda::current_stream();
  EXPECT_EQ(base, cuda::default_stream());
  cuda::Stream side = cuda::stream_from_pool();
  EXPECT_FALSE(side == base);
  {
    cuda::StreamGuard guard(side);
    EXPECT_EQ(cuda::current_stream(), side);
    cuda::Stream seen_by_other_thread;
    std::thread([&] { seen_by_other_thread = cuda::current_stream(); }).join();
    EXPECT_EQ(seen_by_other_thread, base);  // thread-local
  }
  EXPECT_EQ(cuda::current_stream(), base);
}

TEST(CudaStream, EventsOrderWorkAcrossStreamsAndTime) {
  SKIP_WITHOUT_GPU();
  Tensor host = random_input({1 << 20}, test_seed(), kFloat32);
  cuda::Stream side = cuda::stream_from_pool();
  Tensor dev;
  cuda::Event start(true), done(true);
  {
    cuda::StreamGuard guard(side);
    start.record(side);
    dev = host.to(Device::cuda());
    done.record(side);
  }
  done.block(cuda::current_stream());  // the main stream waits for the side stream's copy
  EXPECT_TRUE(all_close(dev.cpu(), host, 0, 0));
  done.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_GE(start.elapsed_ms(done), 0.0f);
}

TEST(CudaStream, PinnedTensorsCopyAsynchronouslyAndTheirBlocksAreCached) {
  SKIP_WITHOUT_GPU();
  Tensor host = random_input({3, 1000}, test_seed(), kFloat32);
  Tensor pinned = host.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_FALSE(host.is_pinned());
  EXPECT_TRUE(all_close(pinned, host, 0, 0));
  Tensor dev = pinned.to(Device::cuda());
  EXPECT_TRUE(all_close(dev.cpu(), host, 0, 0));
  auto before = cuda::pinned_stats();
  size_t calls = before.host_alloc_calls;
  {
    Tensor again = Tensor::empty({3, 1000}, {.pinned_memory = true});
    EXPECT_TRUE(again.is_pinned());
  }
  pinned = Tensor();
  Tensor reused = Tensor::empty({3, 1000}, {.pinned_memory = true});
  cuda::current_stream().synchronize();
  EXPECT_LE(cuda::pinned_stats().host_alloc_calls, calls + 1);  // at most one new block for two tensors
  EXPECT_NABLA_ERROR(Tensor::empty({4}, {.device = Device::cuda(), .pinned_memory = true}), "pinned_memory",
                     "CPU tensors");
}

}  // namespace
}  // namespace nabla
