// The JSONL metrics file: one parseable object per line, flushed at once, append mode for resumes,
// non-finite numbers as null, and clear errors for non-objects and unwritable paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "apps_test_util.h"
#include "nabla/apps/train_support/metrics_writer.h"
#include "test_util.h"

namespace ts = nabla::train_support;
using nabla::testing::read_file;
using nabla::testing::TempDir;
using nabla::testing::test_seed;
using nlohmann::json;

namespace {

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST(MetricsWriter, EachRecordIsOneFlushedLine) {
  TempDir dir;
  const std::string path = dir.file("run/metrics.jsonl");  // the parent is created
  std::mt19937_64 rng(test_seed());
  std::uniform_real_distribution<double> u(0.1, 10.0);
  std::vector<json> written;
  {
    ts::MetricsWriter metrics(path);
    for (int step = 1; step <= 3; ++step) {
      json record = {{"event", "train"}, {"step", step * 100}, {"loss", u(rng)}, {"note", "a\nb \"q\""}};
      metrics.write(record);
      written.push_back(record);
      // Flushed: readable from the file before the writer closes.
      EXPECT_EQ(read_lines(path), written);
    }
  }
  std::string text = read_file(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);  // the embedded newline is escaped
}

TEST(MetricsWriter, AppendKeepsEarlierLinesAndTruncateDoesNot) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  ts::MetricsWriter(path).write({{"step", 1}});
  ts::MetricsWriter(path, {.append = true}).write({{"step", 2}});
  EXPECT_EQ(read_lines(path), (std::vector<json>{{{"step", 1}}, {{"step", 2}}}));
  ts::MetricsWriter(path).write({{"step", 3}});
  EXPECT_EQ(read_lines(path), (std::vector<json>{{{"step", 3}}}));
}

TEST(MetricsWriter, NonFiniteNumbersBecomeNullAndBadInputIsNamed) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  ts::MetricsWriter metrics(path);
  metrics.write({{"loss", std::nan("")}, {"grad_norm", INFINITY}, {"lr", 0.25}});
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].at("loss").is_null());
  EXPECT_TRUE(lines[0].at("grad_norm").is_null());
  EXPECT_EQ(lines[0].at("lr").get<double>(), 0.25);
  EXPECT_NABLA_ERROR(metrics.write(json::array({1, 2})), "must be a JSON object", "array");
  EXPECT_NABLA_ERROR(ts::MetricsWriter(dir.file("m.jsonl/inside")), "m.jsonl");
}
