// Routes: the defaults, and what a RoutesGuard puts in force and restores. That a guard's routes
// reach the CUDA backend is tested in tests/ops/cuda/routes_test.cpp.
#include "nabla/ops/routes.h"

#include <gtest/gtest.h>

#include <thread>

namespace nabla {
namespace {

TEST(Routes, DefaultsAreTorchBackendsDefaults) {
  const Routes r = routes();
  EXPECT_FALSE(r.cudnn_benchmark);      // torch.backends.cudnn.benchmark
  EXPECT_FALSE(r.cudnn_deterministic);  // torch.backends.cudnn.deterministic
  EXPECT_TRUE(r.conv_tf32);             // torch.backends.cudnn.allow_tf32
  EXPECT_FALSE(r.matmul_tf32);          // torch.backends.cuda.matmul.allow_tf32
  EXPECT_TRUE(r.conv_batch_norm_fusion);
  EXPECT_EQ(r, Routes{});
}

TEST(Routes, AGuardPutsItsRoutesInForceAndRestoresThePreviousOnes) {
  const Routes before = routes();
  {
    const RoutesGuard g({.cudnn_benchmark = true, .matmul_tf32 = true});
    const Routes r = routes();
    EXPECT_TRUE(r.cudnn_benchmark);
    EXPECT_TRUE(r.matmul_tf32);
    // Designated initializers leave the other fields at their defaults.
    EXPECT_FALSE(r.cudnn_deterministic);
    EXPECT_TRUE(r.conv_tf32);
  }
  EXPECT_EQ(routes(), before);
}

TEST(Routes, NestedGuardsRestoreInReverseOrder) {
  Routes outer;
  outer.cudnn_deterministic = true;
  outer.conv_tf32 = false;
  const RoutesGuard g1(outer);
  {
    // Changing one field of what is in force keeps the others.
    Routes inner = routes();
    inner.conv_batch_norm_fusion = false;
    const RoutesGuard g2(inner);
    const Routes r = routes();
    EXPECT_TRUE(r.cudnn_deterministic);
    EXPECT_FALSE(r.conv_tf32);
    EXPECT_FALSE(r.conv_batch_norm_fusion);
  }
  EXPECT_EQ(routes(), outer);
}

TEST(Routes, AreProcessWideSoOtherThreadsSeeAGuardsRoutes) {
  const RoutesGuard g({.cudnn_deterministic = true});
  Routes seen;
  std::thread([&] { seen = routes(); }).join();
  EXPECT_TRUE(seen.cudnn_deterministic);
  EXPECT_EQ(seen, routes());
}

}  // namespace
}  // namespace nabla
