// Progress output: the formatted line field by field (hand-computed ETA, bar fill, units), and the
// printer's two modes: a bar redrawn in place on a terminal, rate-limited timestamped lines otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <regex>

#include "apps_test_util.h"
#include "nabla/apps/train_support/progress.h"

namespace ts = nabla::train_support;
using nabla::testing::read_file;
using nabla::testing::TempDir;

TEST(Progress, DurationsAndBytesAreHumanReadable) {
  EXPECT_EQ(ts::format_duration(0), "0:00");
  EXPECT_EQ(ts::format_duration(65.4), "1:05");
  EXPECT_EQ(ts::format_duration(3600 + 2 * 60 + 3), "1:02:03");
  EXPECT_EQ(ts::format_duration(-1), "?");
  EXPECT_EQ(ts::format_duration(INFINITY), "?");
  EXPECT_EQ(ts::format_bytes(512), "512 B");
  EXPECT_EQ(ts::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(ts::format_bytes(int64_t{13} << 30), "13.0 GiB");
}

TEST(Progress, EtaIsTheRemainingStepsAtTheRateSoFar) {
  // 120 of 480 steps in 60 s: 0.5 s a step, 360 steps left -> 180 s.
  EXPECT_DOUBLE_EQ(ts::eta_seconds({.step = 120, .steps = 480, .elapsed_seconds = 60}), 180.0);
  EXPECT_LT(ts::eta_seconds({.step = 0, .steps = 480, .elapsed_seconds = 1}), 0);  // no rate yet
  EXPECT_LT(ts::eta_seconds({.step = 5, .steps = 0, .elapsed_seconds = 1}), 0);    // no total
}

TEST(Progress, PlainLineHasEveryField) {
  ts::ProgressStats s{.epoch = 3,
                      .epochs = 90,
                      .step = 1200,
                      .steps = 5004,
                      .loss = 1.93124,
                      .top1 = 0.5421,
                      .lr = 0.1,
                      .images_per_second = 2345.6,
                      .data_wait_fraction = 0.031,
                      .gpu_memory_bytes = int64_t{12} << 30,
                      .elapsed_seconds = 600};
  // eta = 600 * (5004 - 1200) / 1200 = 1902 s = 31:42.
  EXPECT_EQ(ts::format_progress(s),
            "epoch 3/90 step 1200/5004 loss 1.9312 top1 54.21% lr 0.1 2346 img/s data 3% mem 12.0 GiB "
            "elapsed 10:00 eta 31:42");
}

TEST(Progress, BarFillsInProportionAndUnknownFieldsAreLeftOut) {
  ts::ProgressStats s{.epoch = 1,
                      .epochs = 2,
                      .step = 25,
                      .steps = 100,
                      .lr = 0.5,
                      .images_per_second = 10,
                      .elapsed_seconds = 5};
  std::string line = ts::format_progress(s, {.bar_width = 8});
  EXPECT_EQ(line, "epoch 1/2 [##......] 25/100 lr 0.5 10 img/s data 0% elapsed 0:05 eta 0:15");
  s.step = 100;
  EXPECT_NE(ts::format_progress(s, {.bar_width = 8}).find("[########] 100/100"), std::string::npos);
  s.steps = 0;  // an iterable of unknown length: a step count, no bar, no ETA
  EXPECT_EQ(ts::format_progress(s, {.bar_width = 8}),
            "epoch 1/2 step 100 lr 0.5 10 img/s data 0% elapsed 0:05");
}

TEST(ProgressPrinter, PlainModePrintsTimestampedLinesAtMostOncePerInterval) {
  TempDir dir;
  std::FILE* out = std::fopen(dir.file("log").c_str(), "w");
  ASSERT_NE(out, nullptr);
  ts::ProgressPrinter printer(out, /*terminal=*/false, {.line_interval_seconds = 10});
  EXPECT_FALSE(printer.terminal());
  ts::ProgressStats s{.epoch = 1, .epochs = 1, .steps = 100};
  for (int i = 1; i <= 30; ++i) {  // one step a second: lines at t = 1, 11, 21
    s.step = i;
    printer.update(s, /*now_seconds=*/i);
  }
  s.step = 100;
  printer.finish_epoch(s);
  std::fclose(out);
  std::string log = read_file(dir.file("log"));
  std::regex line(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] epoch 1/1 step (\d+)/100 .*\n)");
  std::vector<std::string> steps;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) steps.push_back((*it)[1]);
  EXPECT_EQ(steps, (std::vector<std::string>{"1", "11", "21", "100"})) << log;
  EXPECT_EQ(log.find('\r'), std::string::npos);
}

TEST(ProgressPrinter, TerminalModeRedrawsOneLinePerEpoch) {
  TempDir dir;
  std::FILE* out = std::fopen(dir.file("tty").c_str(), "w");
  ASSERT_NE(out, nullptr);
  ts::ProgressPrinter printer(out, /*terminal=*/true, {.redraw_interval_seconds = 0.5, .bar_width = 4});
  ts::ProgressStats s{.epoch = 1, .epochs = 2, .steps = 4};
  for (int i = 1; i <= 4; ++i) {
    s.step = i;
    printer.update(s, i * 0.3);  // redraws at 0.3 and 0.9 only
  }
  printer.finish_epoch(s);
  s.epoch = 2;
  s.step = 1;
  printer.update(s, 1.0);  // a new epoch draws at once
  std::fclose(out);
  std::string tty = read_file(dir.file("tty"));
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\r'), 4);
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\n'), 1);  // only the finished epoch ends its line
  EXPECT_NE(tty.find("\repoch 1/2 [#...] 1/4"), std::string::npos) << tty;
  EXPECT_NE(tty.find("\repoch 1/2 [###.] 3/4"), std::string::npos) << tty;
  EXPECT_NE(tty.find("\repoch 1/2 [####] 4/4"), std::string::npos) << tty;
  EXPECT_NE(tty.find("\x1b[K\n\repoch 2/2 [#...] 1/4"), std::string::npos) << tty;
}
