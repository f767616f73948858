// Stop on SIGINT/SIGTERM: the first signal only sets the flag (the process goes on), the second
// exits at once with 128 + signal, and the previous handlers come back afterwards.
#include <gtest/gtest.h>

#include <csignal>

#include "nabla/apps/train_support/stop_signal.h"
#include "test_util.h"

namespace ts = nabla::train_support;

namespace {

void (*current_handler(int signo))(int) {
  struct sigaction now {};
  sigaction(signo, nullptr, &now);
  return now.sa_handler;
}

}  // namespace

TEST(StopSignal, FirstSignalSetsTheFlagAndTheProcessGoesOn) {
  for (int signo : {SIGINT, SIGTERM}) {
    ts::StopSignal stop;
    EXPECT_FALSE(stop.requested());
    EXPECT_EQ(stop.signal(), 0);
    std::raise(signo);  // delivered before raise returns (single-threaded test)
    EXPECT_TRUE(stop.requested());
    EXPECT_EQ(stop.signal(), signo);
  }
  EXPECT_STREQ(ts::signal_name(SIGINT), "SIGINT");
  EXPECT_STREQ(ts::signal_name(SIGTERM), "SIGTERM");
}

TEST(StopSignal, RestoresThePreviousHandlersAndAllowsOneAtATime) {
  auto before_int = current_handler(SIGINT), before_term = current_handler(SIGTERM);
  {
    ts::StopSignal stop;
    EXPECT_NE(current_handler(SIGINT), before_int);
    EXPECT_NE(current_handler(SIGTERM), before_term);
    EXPECT_NABLA_ERROR(ts::StopSignal(), "already installed");
    EXPECT_NE(current_handler(SIGINT), before_int);  // the failed second one changed nothing
  }
  EXPECT_EQ(current_handler(SIGINT), before_int);
  EXPECT_EQ(current_handler(SIGTERM), before_term);
  ts::StopSignal again;  // and a new one starts clear
  EXPECT_FALSE(again.requested());
}

TEST(StopSignalDeathTest, SecondSignalExitsAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ts::StopSignal stop;
        std::raise(SIGTERM);
        if (!stop.requested()) std::_Exit(3);
        std::raise(SIGINT);  // does not return
        std::_Exit(4);
      },
      ::testing::ExitedWithCode(128 + SIGINT), "SIGTERM received.*second signal, exiting now");
}
