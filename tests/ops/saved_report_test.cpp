// NABLA_SAVED_REPORT (ops/autograd/detail/saved_report.h): the saved set of a small graph, each
// storage once, and the report's totals against bytes counted from the tensors themselves.
#include <gtest/gtest.h>

#include "nabla/ops/autograd/detail/saved_report.h"
#include "test_util.h"

namespace nabla {
namespace {

using testing::random_input;
using testing::test_seed;

struct ReportOn {
  ReportOn() { autograd::detail::set_saved_report(true); }
  ~ReportOn() { autograd::detail::set_saved_report(false); }
};

TEST(SavedReport, CountsEachSavedStorageOnceByTheFirstNodeThatSavedIt) {
  const ReportOn on;
  const Tensor x = random_input({4, 8}, test_seed(), kFloat32, true);
  const Tensor w = random_input({8, 16}, test_seed() + 1, kFloat32, true);
  const Tensor y = relu(matmul(x, w));
  const Tensor loss = (y * y).sum();  // the product saves y twice, relu once: one storage
  ::testing::internal::CaptureStderr();
  loss.backward();
  const std::string report = ::testing::internal::GetCapturedStderr();
  // matmul keeps x and w; relu and the product keep y, counted once.
  const size_t expected = (x.numel() + w.numel() + y.numel()) * sizeof(float);
  EXPECT_NE(
      report.find(fmt::format("saved for backward: {} B in 3 storages (2 more saves share one", expected)),
      std::string::npos)
      << report;
  EXPECT_NE(report.find("NABLA_SAVED_REPORT, backward on cpu"), std::string::npos) << report;
  EXPECT_NE(report.find(fmt::format("{} B     1 x", y.numel() * sizeof(float))), std::string::npos) << report;
}

TEST(SavedReport, IsSilentWhenOff) {
  autograd::detail::set_saved_report(false);
  const Tensor x = random_input({3}, test_seed(), kFloat32, true);
  ::testing::internal::CaptureStderr();
  (x * x).sum().backward();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace nabla
