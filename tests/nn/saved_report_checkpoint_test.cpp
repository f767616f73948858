// NABLA_SAVED_REPORT with gradient checkpointing: a segment's backward runs inside a node of the
// outer backward, and only the outer pass reports (ops/autograd/detail/saved_report.h).
#include <gtest/gtest.h>

#include "nabla/nn/checkpoint.h"
#include "nabla/ops/autograd/detail/saved_report.h"
#include "test_util.h"

namespace nabla {
namespace {

TEST(SavedReport, ACheckpointedSegmentsBackwardDoesNotReportInsideTheOuterOne) {
  autograd::detail::set_saved_report(true);
  const Tensor x = testing::random_input({4, 8}, testing::test_seed(), kFloat32, true);
  const Tensor y = nn::checkpoint([](const Tensor& t) { return relu(t * t); }, x);
  const Tensor loss = (y * 2.0).sum();
  ::testing::internal::CaptureStderr();
  loss.backward();
  const std::string report = ::testing::internal::GetCapturedStderr();
  autograd::detail::set_saved_report(false);
  size_t headers = 0;
  for (size_t at = report.find("NABLA_SAVED_REPORT"); at != std::string::npos;
       at = report.find("NABLA_SAVED_REPORT", at + 1))
    ++headers;
  EXPECT_EQ(headers, 1u) << report;
  // The gradient is still right: d/dx sum(2 relu(x^2)) = 4x.
  EXPECT_TRUE(testing::all_close(x.grad(), 4.0 * x.detach(), 1e-6));
}

}  // namespace
}  // namespace nabla
