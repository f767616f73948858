// nabla-bench's pure report pieces (apps/nabla_bench/table.h): the text table, the comma lists
// of --amp / --layout / --batch-sizes, the latency percentiles (checked against Python's
// statistics module, which the PyTorch script uses), ratios, and reading the script's JSON rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "apps_test_util.h"
#include "nabla_bench/table.h"
#include "test_util.h"

namespace nabla::bench {
namespace {

using nabla::testing::run_command;

TEST(BenchTable, RendersLeftAlignedNamesAndRightAlignedNumbers) {
  Table table({"amp", "img/s", "ratio"});
  table.add_row({"fp16", "6090.0", "1.043"});
  table.add_row({"off", "2157.5", "-"});
  EXPECT_EQ(table.rows(), 2u);
  // Widths: amp 4, img/s 6, ratio 5; two spaces between columns; trailing spaces trimmed.
  const std::string expected =
      "amp    img/s  ratio\n"
      "-------------------\n"
      "fp16  6090.0  1.043\n"
      "off   2157.5      -\n";
  EXPECT_EQ(table.render(), expected);
}

TEST(BenchTable, RowOfTheWrongLengthIsAnError) {
  Table table({"a", "b"});
  EXPECT_THROW(table.add_row({"1"}), Error);
  EXPECT_THROW(table.add_row({"1", "2", "3"}), Error);
}

TEST(BenchTable, ParsesChoiceListsInOrder) {
  const std::vector<std::string> allowed = {"off", "fp16", "bf16"};
  EXPECT_EQ(parse_choices("off", "--amp", allowed), (std::vector<std::string>{"off"}));
  EXPECT_EQ(parse_choices("bf16,off,fp16", "--amp", allowed),
            (std::vector<std::string>{"bf16", "off", "fp16"}));
  EXPECT_EQ(parse_choices("off, fp16", "--amp", allowed), (std::vector<std::string>{"off", "fp16"}));
}

TEST(BenchTable, BadChoiceListsNameTheFlagAndTheAllowedValues) {
  const std::vector<std::string> allowed = {"off", "fp16", "bf16"};
  EXPECT_NABLA_ERROR(parse_choices("fp16,fp8", "--amp", allowed), "--amp", "'fp8'", "off, fp16, bf16");
  EXPECT_NABLA_ERROR(parse_choices("off,,fp16", "--amp", allowed), "--amp", "empty item");
  EXPECT_NABLA_ERROR(parse_choices("", "--amp", allowed), "--amp", "empty item");
  EXPECT_NABLA_ERROR(parse_choices("fp16,fp16", "--amp", allowed), "--amp", "'fp16' is listed twice");
}

TEST(BenchTable, ParsesBatchSizeLists) {
  EXPECT_EQ(parse_positive_ints("16,32,64,256", "--batch-sizes"), (std::vector<int64_t>{16, 32, 64, 256}));
  EXPECT_EQ(parse_positive_ints("7", "--batch-sizes"), (std::vector<int64_t>{7}));
  for (const char* bad : {"", "16,,32", "0", "-4", "abc", "16x", "99999999999999999999999"}) {
    EXPECT_NABLA_ERROR(parse_positive_ints(bad, "--batch-sizes"), "--batch-sizes", "positive integers");
  }
  EXPECT_NABLA_ERROR(parse_positive_ints("16,32,16", "--batch-sizes"), "16 is listed twice");
}

TEST(BenchTable, LayoutFlagsResolveToOneList) {
  EXPECT_EQ(resolve_layouts("", false), (std::vector<std::string>{"nchw"}));
  EXPECT_EQ(resolve_layouts("", true), (std::vector<std::string>{"channels-last"}));
  EXPECT_EQ(resolve_layouts("channels-last,nchw", false),
            (std::vector<std::string>{"channels-last", "nchw"}));
  EXPECT_NABLA_ERROR(resolve_layouts("nchw", true), "--layout or --channels-last, not both");
  EXPECT_NABLA_ERROR(resolve_layouts("nhwc", false), "--layout", "'nhwc'", "nchw, channels-last");
}

TEST(BenchTable, PercentileInterpolatesBetweenClosestRanks) {
  // Sorted {1, 2, 3, 4}: the median sits halfway between 2 and 3; p90 at position 3 * 0.9 = 2.7,
  // i.e. 3 + 0.7 * (4 - 3).
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({5.5}, 90), 5.5);
  EXPECT_NABLA_ERROR(percentile({}, 50), "at least one sample");
  EXPECT_NABLA_ERROR(percentile({1, 2}, 101), "q in [0, 100]");
}

TEST(BenchTable, MedianOfRandomSamplesIsTheMiddleElement) {
  std::mt19937_64 rng(nabla::testing::test_seed());
  std::uniform_real_distribution<double> ms(0.5, 40.0);
  for (size_t n : {1u, 2u, 7u, 50u, 51u}) {
    std::vector<double> samples(n);
    for (auto& s : samples) s = ms(rng);
    // A second algorithm: partial selection of the middle one (odd) or two (even) elements.
    std::vector<double> copy = samples;
    auto mid = copy.begin() + static_cast<std::ptrdiff_t>(n / 2);
    std::nth_element(copy.begin(), mid, copy.end());
    double expected = *mid;
    if (n % 2 == 0) expected = (expected + *std::max_element(copy.begin(), mid)) / 2;
    EXPECT_NEAR(percentile(samples, 50), expected, 1e-12) << "n = " << n;
  }
}

TEST(BenchTable, PercentileAgreesWithPythonStatisticsQuantiles) {
  // nabla_bench_torch.py's p90 must mean the same thing; statistics.quantiles with the
  // "inclusive" method is that definition, computed by Python.
  if (run_command("/usr/bin/python3 -c 'import statistics' 2>/dev/null").status != 0)
    GTEST_SKIP() << "no /usr/bin/python3";
  std::mt19937_64 rng(nabla::testing::test_seed());
  std::uniform_real_distribution<double> ms(0.5, 40.0);
  std::vector<double> samples(37);
  std::string list;
  for (auto& s : samples) {
    s = ms(rng);
    list += fmt::format("{:.17g},", s);
  }
  auto result =
      run_command(fmt::format("/usr/bin/python3 -c 'import statistics; s=[{}]; q=statistics.quantiles(s, "
                              "n=10, method=\"inclusive\"); "
                              "print(repr(q[8]), repr(statistics.median(s)))'",
                              list));
  ASSERT_EQ(result.status, 0) << result.output;
  double p90 = 0, median = 0;
  ASSERT_EQ(std::sscanf(result.output.c_str(), "%lf %lf", &p90, &median), 2) << result.output;
  EXPECT_NEAR(percentile(samples, 90), p90, 1e-9);
  EXPECT_NEAR(percentile(samples, 50), median, 1e-9);
}

TEST(BenchTable, RatioNeedsBothSidesFiniteAndNonZero) {
  EXPECT_DOUBLE_EQ(*ratio(6090.0, 5837.5), 6090.0 / 5837.5);
  EXPECT_DOUBLE_EQ(*ratio(11.19, 11.01), 11.19 / 11.01);
  EXPECT_FALSE(ratio(std::nullopt, 2.0));
  EXPECT_FALSE(ratio(2.0, std::nullopt));
  EXPECT_FALSE(ratio(2.0, 0.0));
  EXPECT_FALSE(ratio(2.0, std::nan("")));
  EXPECT_FALSE(ratio(INFINITY, 2.0));
}

TEST(BenchTable, FormatsNumbersAndMissingValues) {
  EXPECT_EQ(format_number(1.23456, 2), "1.23");
  EXPECT_EQ(format_number(2157.46, 1), "2157.5");
  EXPECT_EQ(format_number(std::nullopt, 2), "-");
  EXPECT_EQ(format_number(std::nan(""), 2), "-");
  nlohmann::json row = {{"img_s", 12.5}, {"batch", 16}, {"amp", "fp16"}, {"none", nullptr}};
  EXPECT_EQ(number_at(row, "img_s"), 12.5);
  EXPECT_EQ(number_at(row, "batch"), 16.0);
  EXPECT_FALSE(number_at(row, "amp"));
  EXPECT_FALSE(number_at(row, "none"));
  EXPECT_FALSE(number_at(row, "absent"));
}

TEST(BenchTable, ReadsJsonRowsAmongOtherOutput) {
  const std::string output =
      "/usr/lib/python3/dist-packages/torch/cuda/__init__.py: UserWarning: something\n"
      "{\"bench\": \"infer\", \"batch\": 16, \"img_s\": 3800.5}\n"
      "  {\"bench\": \"infer\", \"batch\": 32, \"img_s\": 7100}\n"
      "{not json at all\n"
      "[1, 2, 3]\n"
      "\n"
      "{\"bench\": \"infer\", \"batch\": 64, \"img_s\": 9000}";  // no final newline
  auto rows = parse_json_rows(output);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["batch"], 16);
  EXPECT_EQ(number_at(rows[0], "img_s"), 3800.5);
  EXPECT_EQ(rows[1]["batch"], 32);
  EXPECT_EQ(rows[2]["batch"], 64);
  EXPECT_TRUE(parse_json_rows("").empty());
}

TEST(BenchTable, FindsTheRowWithTheSameConfiguration) {
  std::vector<nlohmann::json> torch = {
      {{"arch", "resnet50"}, {"batch", 16}, {"amp", "off"}, {"layout", "nchw"}, {"img_s", 1.0}},
      {{"arch", "resnet50"}, {"batch", 16}, {"amp", "fp16"}, {"layout", "nchw"}, {"img_s", 2.0}},
      {{"arch", "resnet50"}, {"batch", 32.0}, {"amp", "fp16"}, {"layout", "nchw"}, {"img_s", 3.0}}};
  const std::vector<std::string> keys = {"arch", "batch", "amp", "layout"};
  nlohmann::json like = {{"arch", "resnet50"}, {"batch", 16}, {"amp", "fp16"}, {"layout", "nchw"}};
  ASSERT_NE(find_row(torch, like, keys), nullptr);
  EXPECT_EQ(number_at(*find_row(torch, like, keys), "img_s"), 2.0);
  like["batch"] = 32;  // an integer matches the same number written as a float
  ASSERT_NE(find_row(torch, like, keys), nullptr);
  EXPECT_EQ(number_at(*find_row(torch, like, keys), "img_s"), 3.0);
  like["layout"] = "channels-last";
  EXPECT_EQ(find_row(torch, like, keys), nullptr);
  like.erase("layout");  // a key missing on one side never matches
  EXPECT_EQ(find_row(torch, like, keys), nullptr);
}

}  // namespace
}  // namespace nabla::bench
