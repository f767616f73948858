// nabla-train's bad flags and inputs: each ends the run with one line that names the flag and
// what is allowed, and a non-zero status; never a crash, a stack trace or a silent default.
#include <gtest/gtest.h>

#include <sstream>

#include "train_test_util.h"

namespace nabla::testing {
namespace {

// The lines of `text` that start with "nabla-train: " (the error line), and whether anything
// looks like a crash.
std::vector<std::string> error_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("nabla-train: ", 0) == 0) lines.push_back(line);
  }
  return lines;
}

void expect_one_line_error(const std::string& args, const std::vector<std::string>& must_contain) {
  SCOPED_TRACE(args);
  auto r = run_train(args + " --log-level error");
  EXPECT_NE(exit_code(r), 0) << r.output;
  EXPECT_NE(exit_code(r), -1) << "killed by a signal: " << r.output;
  auto lines = error_lines(r.output);
  ASSERT_EQ(lines.size(), 1u) << r.output;
  for (const auto& part : must_contain) EXPECT_NE(lines[0].find(part), std::string::npos) << lines[0];
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

TEST(TrainFlags, UnknownArchNamesTheAllowedOnes) {
  expect_one_line_error("--arch resnet9",
                        {"--arch resnet9", "resnet18", "smallcnn", "efficientnet_b0", "vit_b_16"});
}

TEST(TrainFlags, VitNeedsAnImageSizeThatItsPatchesDivide) {
  expect_one_line_error("--data synthetic --device cpu --arch vit_b_16 --image-size 40",
                        {"vit_b_16", "multiple of 16", "40x40"});
  expect_one_line_error("--data synthetic --device cpu --arch mobilenet_v2 --grad-checkpoint 2",
                        {"--grad-checkpoint 2", "only the ResNets", "mobilenet_v2"});
}

TEST(TrainFlags, MissingDataDirectory) {
  expect_one_line_error("--data /nonexistent/imagenet",
                        {"--data /nonexistent/imagenet", "no such directory"});
}

TEST(TrainFlags, DataDirectoryWithoutTrainFolder) {
  TempDir dir;
  expect_one_line_error("--data " + dir.path().string(), {"--data", "train/"});
}

TEST(TrainFlags, UnknownDataForm) {
  expect_one_line_error("--data mnist:/tmp", {"--data mnist:/tmp", "cifar10:DIR"});
}

TEST(TrainFlags, BatchSizeZeroAndNonNumbers) {
  expect_one_line_error("--batch-size 0", {"--batch-size 0", "positive integer", "auto"});
  expect_one_line_error("--batch-size 12x", {"--batch-size 12x"});
}

TEST(TrainFlags, MixedPrecisionOnCpu) {
  expect_one_line_error("--amp fp16 --device cpu", {"--amp fp16", "GPU", "--amp off"});
  expect_one_line_error("--amp fp8 --device cpu", {"--amp fp8", "off, fp16, bf16"});
}

TEST(TrainFlags, ChoicesAndRanges) {
  expect_one_line_error("--optimizer rmsprop", {"--optimizer rmsprop", "sgd, adamw, lars"});
  expect_one_line_error("--lr-schedule exp", {"--lr-schedule exp", "cosine"});
  expect_one_line_error("--device tpu", {"--device tpu", "cpu or cuda:N"});
  expect_one_line_error("--ema 1.5", {"--ema 1.5", "[0, 1)"});
  expect_one_line_error("--grad-accum-steps 0", {"--grad-accum-steps 0"});
  expect_one_line_error("--label-smoothing 1", {"--label-smoothing 1"});
  expect_one_line_error("--image-size 32", {"--image-size 32", "28x28"});
  expect_one_line_error("--loss-scale big", {"--loss-scale big", "dynamic"});
  expect_one_line_error("--evaluate-only", {"--evaluate-only", "--pretrained"});
  expect_one_line_error("--no-such-flag", {"no-such-flag"});
}

TEST(TrainFlags, CheckpointFromAnotherArchitecture) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "needs Debian's dataset-fashion-mnist";
  TempDir dir;
  write_small_fashion_mnist(dir.path() / "data", 64, 32);
  const std::string common = " --data fashion-mnist:" + (dir.path() / "data").string() +
                             " --device cpu --batch-size 32 --epochs 1 --progress off --no-tensorboard";
  auto first = run_train("--arch smallcnn --checkpoint-dir " + dir.file("a") + common);
  ASSERT_EQ(exit_code(first), 0) << first.output;
  expect_one_line_error("--arch resnet18 --checkpoint-dir " + dir.file("b") + " --resume " +
                            dir.file("a/checkpoint-000000002.safetensors") + common,
                        {"--resume", "--arch smallcnn", "--arch resnet18"});
}

}  // namespace
}  // namespace nabla::testing
