// Tensor metadata, storage and the CPU allocator (core only: no ops).
#include <gtest/gtest.h>

#include <thread>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/philox.h"
#include "nabla/core/shape.h"
#include "nabla/core/tensor.h"
#include "test_util.h"

namespace nabla {
namespace {

TEST(Shape, ContiguousAndChannelsLastStridesMatchHandComputedValues) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(channels_last_strides({2, 3, 4, 5}), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(is_contiguous_strides({2, 1, 4}, {4, 99, 1}));  // size-1 strides do not matter
  EXPECT_TRUE(is_channels_last_strides({2, 3, 4, 5}, {60, 1, 15, 3}));
  EXPECT_FALSE(is_channels_last_strides({2, 3, 4, 5}, {60, 20, 5, 1}));
  EXPECT_TRUE(is_non_overlapping_and_dense({3, 4}, {1, 3}));
  EXPECT_FALSE(is_non_overlapping_and_dense({3, 4}, {0, 1}));
}

TEST(Shape, BroadcastFollowsNumpyRulesAndNamesTheOp) {
  EXPECT_EQ(broadcast_shapes({4, 1, 3}, {5, 1}, "t"), (Shape{4, 5, 3}));
  EXPECT_EQ(broadcast_shapes({}, {2}, "t"), (Shape{2}));
  EXPECT_NABLA_ERROR(broadcast_shapes({2, 3}, {4, 3}, "myop"), "myop", "[2, 3]", "[4, 3]", "dim 0");
}

TEST(Tensor, EmptyAllocatesAlignedStorageOfTheRightSize) {
  Tensor t = Tensor::empty({3, 5}, {.dtype = kFloat64});
  EXPECT_EQ(t.nbytes(), 3u * 5u * 8u);
  EXPECT_EQ(t.storage()->nbytes(), t.nbytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignment, 0u);
  EXPECT_TRUE(t.is_contiguous());
  Tensor cl = Tensor::empty({2, 3, 4, 5}, {.memory_format = MemoryFormat::ChannelsLast});
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
}

TEST(Tensor, FromBlobBorrowsAndDataPtrChecksTheType) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_blob(data, {2, 3});
  EXPECT_EQ(t.data_ptr<float>(), data);
  EXPECT_NABLA_ERROR(t.data_ptr<double>(), "data_ptr<float64>()", "float32 tensor");
  Tensor a = t.as_strided({3}, {2}, 1);  // every other element from the second
  EXPECT_EQ(a.storage().get(), t.storage().get());
  EXPECT_EQ(*static_cast<float*>(a.data_ptr()), 2.0f);
}

TEST(Tensor, DetachSharesStorageAndTheVersionCounter) {
  Tensor t = Tensor::empty({4});
  Tensor d = t.detach();
  EXPECT_EQ(d.storage().get(), t.storage().get());
  uint32_t v = t.version();
  d.bump_version();
  EXPECT_EQ(t.version(), v + 1);
}

TEST(Tensor, UndefinedTensorsExplainThemselves) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_NABLA_ERROR(t.sizes(), "undefined tensor");
  EXPECT_EQ(describe(t), "an undefined tensor");
}

TEST(GradMode, GuardsNestAndRestorePerThread) {
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard a;
    {
      EnableGradGuard b;
      EXPECT_TRUE(GradMode::is_enabled());
    }
    EXPECT_FALSE(GradMode::is_enabled());
    bool other_thread = false;
    std::thread([&] { other_thread = GradMode::is_enabled(); }).join();
    EXPECT_TRUE(other_thread);  // thread-local
  }
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(Philox, MatchesTheRandom123KnownAnswer) {
  // Known-answer test for Philox4x32-10 from Random123 (kat_vectors): counter all 0xffffffff is
  // not representable with our 64-bit counter, so use the all-zero vector:
  // ctr = {0,0,0,0}, key = {0,0} -> {6627e8d5, e169c58d, bc57ac4c, 9b00dbd8}.
  auto r = philox::philox4x32_10(0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

TEST(Generator, ReserveAdvancesTheOffsetAndSeedResets) {
  Generator g(5);
  EXPECT_EQ(g.reserve(10).offset, 0u);
  EXPECT_EQ(g.reserve(3).offset, 10u);
  g.manual_seed(7);
  EXPECT_EQ(g.state().seed, 7u);
  EXPECT_EQ(g.state().offset, 0u);
}

}  // namespace
}  // namespace nabla
