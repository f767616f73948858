// nabla::profiler (core/profiler.h): every dispatched op and backward node gets a row, nested
// ops are owned by the outermost one, and start/stop refuse to be called out of turn.
#include <gtest/gtest.h>

#include <nabla/nabla.h>

#include <algorithm>

namespace nabla {
namespace {

const profiler::OpTime* row(const profiler::Report& r, const std::string& op) {
  const auto it = std::find_if(r.ops.begin(), r.ops.end(), [&](const auto& t) { return t.op == op; });
  return it == r.ops.end() ? nullptr : &*it;
}

TEST(Profiler, CountsEachOpAndBackwardNodeOnceAndNestedOpsNotAtAll) {
  Generator gen(11);
  const Tensor w = randn({64, 32}, {}, &gen).requires_grad_();
  const Tensor x = randn({16, 32}, {}, &gen);
  profiler::start();
  EXPECT_TRUE(profiler::is_recording());
  for (int i = 0; i < 3; ++i) {
    const Tensor loss = sum(linear(x, w));
    loss.backward();
  }
  const profiler::Report r = profiler::stop();
  EXPECT_FALSE(profiler::is_recording());
  // The matmul inside linear and the ones inside its backward node are not rows of their own.
  const profiler::OpTime* lin = row(r, "linear");
  ASSERT_NE(lin, nullptr) << profiler::table(r);
  EXPECT_EQ(lin->calls, 3);
  EXPECT_EQ(row(r, "matmul"), nullptr) << profiler::table(r);
  const profiler::OpTime* backward = row(r, "linear (backward)");
  ASSERT_NE(backward, nullptr) << profiler::table(r);
  EXPECT_EQ(backward->calls, 3);
  double host = 0;
  for (const auto& t : r.ops) {
    EXPECT_GE(t.host_ms, 0.0);
    EXPECT_EQ(t.device_ms, 0.0) << t.op << " ran on the CPU";
    host += t.host_ms;
  }
  EXPECT_GT(host, 0.0);
  const std::string text = profiler::table(r);
  EXPECT_NE(text.find("linear"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos) << text;
}

TEST(Profiler, RecordsNothingWhileStoppedAndRefusesCallsOutOfTurn) {
  EXPECT_THROW(profiler::stop(), Error);
  profiler::start();
  EXPECT_THROW(profiler::start(), Error);
  profiler::stop();
  (void)exp(ones({4}));  // not recorded
  profiler::start();
  (void)sqrt(ones({4}));
  const profiler::Report r = profiler::stop();
  EXPECT_EQ(row(r, "exp"), nullptr) << profiler::table(r);
  EXPECT_NE(row(r, "sqrt"), nullptr) << profiler::table(r);
}

}  // namespace
}  // namespace nabla
