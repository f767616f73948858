// copy_many on the CPU (one copy_ per pair there) against copy_ pair by pair, and its errors.
// The batched CUDA path is tested in tests/ops/cuda/parity_copy_test.cpp.
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;

TEST(CopyMany, EqualsOneCopyPerPairWithCastsAndLayouts) {
  const uint64_t seed = testing::test_seed();
  Tensor a = zeros({3, 4});
  Tensor b = zeros({2, 3, 4, 5}, {.memory_format = MemoryFormat::ChannelsLast});
  Tensor c = zeros({6}, {.dtype = kFloat64});
  Tensor sa = random_input({3, 4}, seed, kFloat32);
  Tensor sb = random_input({2, 3, 4, 5}, seed + 1, kFloat32);  // NCHW into NHWC
  Tensor sc = random_input({6}, seed + 2, kFloat32);           // float32 into float64
  copy_many({a, b, c}, {sa, sb, sc});
  EXPECT_TRUE(all_close(a, sa, 0, 0));
  EXPECT_TRUE(all_close(b, sb, 0, 0));
  EXPECT_TRUE(all_close(c, sc.to(kFloat64), 0, 0));
  EXPECT_TRUE(b.is_contiguous(MemoryFormat::ChannelsLast));
}

TEST(CopyMany, RejectsMismatchedListsAndDestinationsThatNeedGrad) {
  Tensor a = zeros({4});
  Tensor b = ones({4});
  EXPECT_NABLA_ERROR(copy_many({a, b}, {b}), "2 destinations but 1 sources");
  Tensor w = zeros({4});
  w.requires_grad_(true);
  EXPECT_NABLA_ERROR(copy_many({w}, {b}), "requires grad");
  EXPECT_TRUE(all_close(w.detach(), zeros({4}), 0, 0));
}

}  // namespace
}  // namespace nabla
