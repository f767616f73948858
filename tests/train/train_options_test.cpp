// nabla-train's optimizer, schedule and model options run end to end on the CPU, and
// --pretrained / --evaluate-only load weights by their torchvision names.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "nabla/core/io/safetensors.h"
#include "train_test_util.h"

namespace nabla::testing {
namespace {

class TrainOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_fashion_mnist()) GTEST_SKIP() << "needs Debian's dataset-fashion-mnist";
    write_small_fashion_mnist(dir_.path() / "data", 128, 64);
  }
  std::string common() const {
    return " --data fashion-mnist:" + (dir_.path() / "data").string() +
           " --device cpu --arch smallcnn --batch-size 16 --epochs 2 --progress off --no-tensorboard";
  }
  // The "epoch" records of a run's metrics.jsonl.
  std::vector<nlohmann::json> epochs(const std::string& run) const {
    std::vector<nlohmann::json> out;
    std::istringstream in(read_file(dir_.file(run + "/metrics.jsonl")));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j["event"] == "epoch") out.push_back(j);
    }
    return out;
  }
  TempDir dir_;
};

TEST_F(TrainOptions, EveryOptimizerAndScheduleTrains) {
  const std::vector<std::string> variants = {
      "--optimizer adamw --lr-schedule linear --warmup-epochs 1 --ema 0.9 --clip-grad 1 --label-smoothing "
      "0.1",
      "--optimizer lars --lr-schedule poly --no-bn-weight-decay",
      "--optimizer sgd --no-nesterov --lr-schedule step --lr-step-epochs 1 --lr-step-gamma 0.5",
      "--optimizer sgd --lr-schedule cosine --grad-accum-steps 2 --lr 0.02 --lr-scale-batch 32"};
  for (size_t i = 0; i < variants.size(); ++i) {
    SCOPED_TRACE(variants[i]);
    const std::string run = "v" + std::to_string(i);
    auto r = run_train(variants[i] + " --checkpoint-dir " + dir_.file(run) + common());
    ASSERT_EQ(exit_code(r), 0) << r.output;
    auto records = epochs(run);
    ASSERT_EQ(records.size(), 2u) << r.output;
    for (const auto& e : records) {
      EXPECT_TRUE(std::isfinite(e["loss"].get<double>())) << e;
      EXPECT_GT(e["loss"].get<double>(), 0.0);
    }
    // Learning on 128 images is noisy, but the second epoch's loss should not be worse than chance.
    EXPECT_LT(records[1]["loss"].get<double>(), std::log(10.0) + 0.2) << r.output;
  }
  // 128 images at batch 16 accumulated over 2 batches: 4 optimizer steps per epoch.
  auto accum =
      run_train("--grad-accum-steps 2 --max-steps 3 --checkpoint-dir " + dir_.file("acc") + common());
  ASSERT_EQ(exit_code(accum), 0) << accum.output;
  EXPECT_NE(accum.output.find("2 epochs x 4 steps"), std::string::npos) << accum.output;
  // --lr-scale-batch: 0.02 x (16 x 2) / 32 = 0.02; x (16 x 1) / 32 = 0.01.
  auto scaled =
      run_train("--lr 0.02 --lr-scale-batch 32 --max-steps 1 --checkpoint-dir " + dir_.file("s") + common());
  EXPECT_NE(scaled.output.find("sgd lr 0.01 "), std::string::npos) << scaled.output;
}

TEST_F(TrainOptions, PretrainedWeightsEvaluateToTheSameAccuracy) {
  auto r = run_train("--checkpoint-dir " + dir_.file("run") + common());
  ASSERT_EQ(exit_code(r), 0) << r.output;
  const double trained_top1 = epochs("run").back()["val_top1"].get<double>();

  // A plain torchvision-style file: the model's tensors without the checkpoint's "model." prefix.
  auto checkpoint = load_safetensors(dir_.file("run/checkpoint-000000016.safetensors"));
  std::map<std::string, Tensor> weights;
  for (const auto& [key, value] : checkpoint.tensors) {
    if (key.rfind("model.", 0) == 0) weights[key.substr(6)] = value;
  }
  ASSERT_GT(weights.size(), 8u);
  save_safetensors(dir_.file("weights.safetensors"), weights);

  auto e = run_train("--evaluate-only --pretrained " + dir_.file("weights.safetensors") +
                     " --checkpoint-dir " + dir_.file("eval") + common());
  ASSERT_EQ(exit_code(e), 0) << e.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(e.output, m, std::regex("top-1 ([0-9.]+)%"))) << e.output;
  EXPECT_NEAR(std::stod(m[1]) / 100, trained_top1, 1e-4) << e.output;
  EXPECT_NE(e.output.find("on 64 validation images"), std::string::npos) << e.output;

  // A file of another architecture's weights is refused, naming what is wrong.
  std::map<std::string, Tensor> wrong = {{"nothing.weight", weights.begin()->second}};
  save_safetensors(dir_.file("wrong.safetensors"), wrong);
  auto bad = run_train("--evaluate-only --pretrained " + dir_.file("wrong.safetensors") +
                       " --checkpoint-dir " + dir_.file("bad") + common());
  EXPECT_NE(exit_code(bad), 0);
  EXPECT_NE(bad.output.find("--pretrained"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace nabla::testing
