// nabla-bench --compare-pytorch (apps/nabla_bench/torch_compare.h): finding and running the
// PyTorch script, the one-line reasons for skipping, and joining its rows to nabla's. The real
// bench/pytorch/nabla_bench_torch.py runs here on the CPU (Debian's torch 1.13) with a tiny
// workload; the GPU comparison itself runs on the GPU machine (scripts/gpu/bench-tables.sh).
#include <gtest/gtest.h>

#include "apps_test_util.h"
#include "nabla_bench/table.h"
#include "nabla_bench/torch_compare.h"
#include "test_util.h"

namespace nabla::bench {
namespace {

using nabla::testing::read_file;
using nabla::testing::run_command;
using nabla::testing::TempDir;
using nabla::testing::write_file;

constexpr const char* kPython = "/usr/bin/python3";

bool python_has_torch() {
  return run_command(std::string(kPython) + " -c 'import torch, torchvision' 2>/dev/null").status == 0;
}

TEST(BenchTorchCompare, ShellQuotingSurvivesTheShell) {
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  const std::string word = "a b;$(echo no) 'c' \"d\" \\e";
  auto result = run_command("printf '%s' " + shell_quote(word));
  EXPECT_EQ(result.status, 0);
  EXPECT_EQ(result.output, word);
}

TEST(BenchTorchCompare, FindsTheScriptGivenOrBesideTheBinary) {
  std::string tried;
  EXPECT_EQ(find_torch_script("/nonexistent/nabla_bench_torch.py", tried), "");
  EXPECT_NE(tried.find("/nonexistent/nabla_bench_torch.py"), std::string::npos) << tried;
  // With no path given, the copy beside the binary (tests/CMakeLists.txt puts one there) is found.
  std::string found = find_torch_script("", tried);
  ASSERT_NE(found, "") << tried;
  EXPECT_NE(read_file(found).find("def main(argv)"), std::string::npos) << found;
}

TEST(BenchTorchCompare, MissingScriptOrPythonSkipsWithAReason) {
  auto no_script =
      run_torch_script({.enabled = true, .python = kPython, .script = "/nonexistent/x.py"}, {"infer"});
  EXPECT_TRUE(no_script.rows.empty());
  EXPECT_NE(no_script.skipped.find("was not found"), std::string::npos) << no_script.skipped;
  EXPECT_NE(no_script.skipped.find("/nonexistent/x.py"), std::string::npos) << no_script.skipped;

  TempDir dir;
  write_file(dir.file("s.py"), "print('{\"bench\": \"infer\"}')\n");
  auto no_python = run_torch_script(
      {.enabled = true, .python = "/nonexistent/python3", .script = dir.file("s.py")}, {"infer"});
  EXPECT_TRUE(no_python.rows.empty());
  EXPECT_NE(no_python.skipped.find("'/nonexistent/python3' was not found"), std::string::npos)
      << no_python.skipped;
}

TEST(BenchTorchCompare, ScriptsOwnSkipLineAndFailuresBecomeTheReason) {
  TempDir dir;
  write_file(dir.file("skip.py"),
             "import sys\nprint('{\"skipped\": \"cannot import torch (test)\"}')\nsys.exit(3)\n");
  auto skipped = run_torch_script({.enabled = true, .python = kPython, .script = dir.file("skip.py")}, {});
  EXPECT_TRUE(skipped.rows.empty());
  EXPECT_EQ(skipped.skipped, "cannot import torch (test)");

  write_file(dir.file("fail.py"), "import sys\nprint('Traceback: boom')\nsys.exit(2)\n");
  auto failed = run_torch_script({.enabled = true, .python = kPython, .script = dir.file("fail.py")}, {});
  EXPECT_TRUE(failed.rows.empty());
  EXPECT_NE(failed.skipped.find("exited with status 2"), std::string::npos) << failed.skipped;

  write_file(dir.file("quiet.py"), "print('nothing useful')\n");
  auto quiet = run_torch_script({.enabled = true, .python = kPython, .script = dir.file("quiet.py")}, {});
  EXPECT_NE(quiet.skipped.find("printed no result rows"), std::string::npos) << quiet.skipped;
}

TEST(BenchTorchCompare, PassesArgumentsAndKeepsOnlyBenchRows) {
  TempDir dir;
  // Echoes its arguments back as a row, after a line of noise and a JSON line without "bench".
  write_file(dir.file("echo.py"),
             "import json, sys\nprint('warming up')\nprint(json.dumps({'torch': '0'}))\n"
             "print(json.dumps({'bench': 'infer', 'args': sys.argv[1:]}))\n");
  auto result = run_torch_script({.enabled = true, .python = kPython, .script = dir.file("echo.py")},
                                 {"infer", "--amp", "off,fp16", "it's spaced"});
  ASSERT_EQ(result.skipped, "");
  ASSERT_EQ(result.rows.size(), 1u);
  EXPECT_EQ(result.rows[0]["args"], nlohmann::json({"infer", "--amp", "off,fp16", "it's spaced"}));
}

TEST(BenchTorchCompare, AttachesPyTorchNumbersAndRatiosToMatchingRows) {
  std::vector<nlohmann::json> nabla = {{{"arch", "resnet50"},
                                        {"batch", 256},
                                        {"amp", "fp16"},
                                        {"layout", "channels-last"},
                                        {"img_s", 6090.0},
                                        {"peak_alloc_GiB", 11.19}},
                                       {{"arch", "resnet50"},
                                        {"batch", 256},
                                        {"amp", "bf16"},
                                        {"layout", "channels-last"},
                                        {"img_s", 2563.9},
                                        {"peak_alloc_GiB", 11.19}}};
  std::vector<nlohmann::json> torch = {
      {{"arch", "resnet50"},
       {"batch", 256},
       {"amp", "fp16"},
       {"layout", "channels-last"},
       {"img_s", 5837.5},
       {"peak_alloc_GiB", 11.01}},
      // bf16 failed in PyTorch: a row without numbers, so no ratio.
      {{"arch", "resnet50"}, {"batch", 256}, {"amp", "bf16"}, {"layout", "channels-last"}, {"error", "oom"}}};
  attach_torch_rows(nabla, torch, {"arch", "batch", "amp", "layout"}, {"img_s", "peak_alloc_GiB"});
  EXPECT_DOUBLE_EQ(nabla[0]["torch_img_s"].get<double>(), 5837.5);
  EXPECT_DOUBLE_EQ(nabla[0]["ratio_img_s"].get<double>(), 6090.0 / 5837.5);
  EXPECT_DOUBLE_EQ(nabla[0]["ratio_peak_alloc_GiB"].get<double>(), 11.19 / 11.01);
  EXPECT_TRUE(nabla[1]["torch_img_s"].is_null());
  EXPECT_TRUE(nabla[1]["ratio_img_s"].is_null());
  EXPECT_EQ(format_number(number_at(nabla[1], "ratio_img_s"), 3), "-");
}

TEST(BenchTorchCompare, RealScriptMeasuresInferenceOnTheCpu) {
  if (!python_has_torch()) GTEST_SKIP() << kPython << " has no torch/torchvision";
  auto result =
      run_torch_script({.enabled = true, .python = kPython, .script = ""},
                       {"infer", "--device", "cpu", "--arch", "resnet18", "--batch-sizes", "1,2", "--amp",
                        "off", "--layout", "nchw,channels-last", "--warmup", "1", "--iters", "3"});
  ASSERT_EQ(result.skipped, "");
  ASSERT_EQ(result.rows.size(), 4u);  // layouts x batch sizes, in the order nabla-bench uses
  const std::vector<std::pair<const char*, int>> order = {
      {"nchw", 1}, {"nchw", 2}, {"channels-last", 1}, {"channels-last", 2}};
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& row = result.rows[i];
    EXPECT_EQ(row["bench"], "infer");
    EXPECT_EQ(row["framework"], "torch");
    EXPECT_EQ(row["layout"], order[i].first);
    EXPECT_EQ(row["batch"], order[i].second);
    EXPECT_EQ(row["iters"], 3);
    const double median = *number_at(row, "median_ms"), p90 = *number_at(row, "p90_ms");
    EXPECT_GT(median, 0);
    EXPECT_GE(p90, median);
    // img/s is derived from the median the same way nabla-bench derives it.
    EXPECT_NEAR(*number_at(row, "img_s"), order[i].second * 1000.0 / median, 1e-6 * *number_at(row, "img_s"));
  }
}

TEST(BenchTorchCompare, RealScriptMeasuresTrainingOnTheCpu) {
  if (!python_has_torch()) GTEST_SKIP() << kPython << " has no torch/torchvision";
  auto result = run_torch_script({.enabled = true, .python = kPython, .script = ""},
                                 {"train", "--device", "cpu", "--arch", "resnet18", "--batch-size", "2",
                                  "--amp", "off,bf16", "--steps", "1", "--warmup", "1"});
  ASSERT_EQ(result.skipped, "");
  ASSERT_EQ(result.rows.size(), 2u);  // one per amp, default layout nchw
  for (size_t i = 0; i < 2; ++i) {
    const auto& row = result.rows[i];
    EXPECT_EQ(row["bench"], "train");
    EXPECT_EQ(row["amp"], i == 0 ? "off" : "bf16");
    EXPECT_EQ(row["layout"], "nchw");
    EXPECT_EQ(row["batch"], 2);
    const double ms = *number_at(row, "ms_per_step"), img_s = *number_at(row, "img_s");
    EXPECT_GT(ms, 0);
    EXPECT_NEAR(img_s, 2 * 1000.0 / ms, 1e-6 * img_s);  // one step of 2 images
    EXPECT_TRUE(std::isfinite(*number_at(row, "loss")));
  }
}

TEST(BenchTorchCompare, RealScriptRejectsBadListsWithoutRows) {
  if (!python_has_torch()) GTEST_SKIP() << kPython << " has no torch/torchvision";
  auto result = run_torch_script({.enabled = true, .python = kPython, .script = ""},
                                 {"infer", "--device", "cpu", "--amp", "fp8"});
  EXPECT_TRUE(result.rows.empty());
  EXPECT_NE(result.skipped.find("exited with status"), std::string::npos) << result.skipped;
}

}  // namespace
}  // namespace nabla::bench
