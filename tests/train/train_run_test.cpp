// nabla-train end to end on the CPU: exact resumption, the stop signal, what a run writes
// (metrics.jsonl, TensorBoard events read back with their CRCs checked, checkpoints), and the
// ImageNet folder path on real JPEGs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "nabla/apps/train_support/event_proto.h"
#include "nabla/apps/train_support/tfrecord.h"
#include "nabla/core/io/safetensors.h"
#include "train_test_util.h"

namespace nabla::testing {
namespace {

namespace fs = std::filesystem;

class TrainRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_fashion_mnist()) GTEST_SKIP() << "needs Debian's dataset-fashion-mnist";
    // 200 training images at batch 32: 6 steps per epoch, so a short run crosses epochs.
    write_small_fashion_mnist(dir_.path() / "data", 200, 64);
  }
  std::string common() const {
    return " --data fashion-mnist:" + (dir_.path() / "data").string() +
           " --device cpu --arch smallcnn --batch-size 32 --workers 2 --deterministic --progress off"
           " --seed 7";
  }
  TempDir dir_;
};

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST_F(TrainRun, ResumedRunEndsWithTheSameWeightsAsAnUncutRun) {
  // Uncut: 14 steps (epochs 1-2 and 2 steps into epoch 3).
  auto uncut = run_train("--epochs 3 --max-steps 14 --checkpoint-dir " + dir_.file("uncut") + common());
  ASSERT_EQ(exit_code(uncut), 0) << uncut.output;
  // Cut at step 8 (2 steps into epoch 2), then resumed to step 14.
  auto cut = run_train("--epochs 3 --max-steps 8 --checkpoint-dir " + dir_.file("cut") + common());
  ASSERT_EQ(exit_code(cut), 0) << cut.output;
  auto resumed =
      run_train("--epochs 3 --max-steps 14 --resume auto --checkpoint-dir " + dir_.file("cut") + common());
  ASSERT_EQ(exit_code(resumed), 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;

  auto a = load_safetensors(dir_.file("uncut/checkpoint-000000014.safetensors"));
  auto b = load_safetensors(dir_.file("cut/checkpoint-000000014.safetensors"));
  expect_same_tensors(a, b, "model.");
  expect_same_tensors(a, b, "optimizer.");
  expect_same_tensors(a, b, "scheduler.");
  // And the weights did move: step 8's are not step 14's.
  auto mid = load_safetensors(dir_.file("cut/checkpoint-000000008.safetensors"));
  const Tensor& w8 = mid.tensors.at("model.conv1.weight");
  const Tensor& w14 = b.tensors.at("model.conv1.weight");
  EXPECT_NE(std::memcmp(w8.data_ptr(), w14.data_ptr(), w8.nbytes()), 0);
}

TEST_F(TrainRun, WritesMetricsTensorBoardEventsAndCheckpoints) {
  auto r = run_train("--epochs 3 --checkpoint-dir " + dir_.file("run") + " --keep-last 2" + common());
  ASSERT_EQ(exit_code(r), 0) << r.output;
  EXPECT_NE(r.output.find("done: 18 steps"), std::string::npos) << r.output;

  auto records = read_jsonl(dir_.file("run/metrics.jsonl"));
  int epochs = 0, summaries = 0;
  for (const auto& rec : records) {
    if (rec["event"] == "epoch") {
      ++epochs;
      EXPECT_GT(rec["loss"].get<double>(), 0.0);
      EXPECT_GE(rec["val_top1"].get<double>(), 0.0);
      EXPECT_LE(rec["val_top5"].get<double>(), 1.0);
      EXPECT_GE(rec["val_top5"].get<double>(), rec["val_top1"].get<double>());
    }
    if (rec["event"] == "summary") ++summaries;
  }
  EXPECT_EQ(epochs, 3);
  EXPECT_EQ(summaries, 1);

  // TensorBoard: one events file; every record's CRCs check out (read_tfrecords throws
  // otherwise), and the first is the file-version event.
  std::vector<fs::path> events;
  for (const auto& e : fs::directory_iterator(dir_.file("run"))) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events.push_back(e.path());
  }
  ASSERT_EQ(events.size(), 1u);
  auto tf_records = train_support::read_tfrecords(events[0].string());
  ASSERT_GE(tf_records.size(), 4u);
  EXPECT_NE(tf_records[0].find("brain.Event:2"), std::string::npos);
  bool has_val_top1 = false;
  for (const auto& rec : tf_records) has_val_top1 |= rec.find("val/top1") != std::string::npos;
  EXPECT_TRUE(has_val_top1);

  // --keep-last 2: epochs end at steps 6, 12, 18; the oldest is gone, best is kept apart.
  EXPECT_FALSE(fs::exists(dir_.file("run/checkpoint-000000006.safetensors")));
  EXPECT_TRUE(fs::exists(dir_.file("run/checkpoint-000000012.safetensors")));
  EXPECT_TRUE(fs::exists(dir_.file("run/checkpoint-000000018.safetensors")));
  EXPECT_TRUE(fs::exists(dir_.file("run/best.safetensors")));
}

TEST_F(TrainRun, SigintSavesAtTheNextStepAndExitsZero) {
  const std::string log = dir_.file("log.txt");
  const std::string command = train_binary() + " --epochs 200 --checkpoint-dir " + dir_.file("sig") +
                              common() + " > " + log + " 2>&1";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until training has started (the first epoch's checkpoint exists), then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(dir_.file("sig/checkpoint-000000006.safetensors")) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(dir_.file("sig/checkpoint-000000006.safetensors"))) << read_file(log);
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string output = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("stopped by SIGINT"), std::string::npos) << output;
  EXPECT_NE(output.find("--resume auto"), std::string::npos) << output;
  // The checkpoint of the stop is the newest, and a resumed run picks it up.
  auto resumed =
      run_train("--epochs 200 --max-steps 1 --resume auto --checkpoint-dir " + dir_.file("sig") + common());
  EXPECT_EQ(exit_code(resumed), 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
}

TEST(TrainImageFolder, TrainsOnRealJpegsInTheImageNetLayout) {
  TempDir dir;
  const std::string make =
      "/usr/bin/python3 " + nabla::testing::source_file("tools/make_jpeg_set.py").string() +
      " --classes 10 --per-photo 4 --val-per-photo 1 --width 64 --out " + dir.file("jpegs") + " 2>&1";
  auto made = run_command(make);
  if (made.status != 0)
    GTEST_SKIP() << "cannot make the JPEG set (mate-backgrounds, python3-pil): " << made.output;
  auto r = run_train("--data " + dir.file("jpegs") +
                     " --device cpu --arch resnet18 --image-size 16 --batch-size 8" +
                     " --max-steps 3 --progress off --checkpoint-dir " + dir.file("run"));
  ASSERT_EQ(exit_code(r), 0) << r.output;
  EXPECT_NE(r.output.find("10 classes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("done: 3 steps"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir.file("run/checkpoint-000000003.safetensors")));
}

}  // namespace
}  // namespace nabla::testing

namespace nabla::testing {
namespace {

// Every torchvision-named model trains through nabla-train: two steps on synthetic 32x32 images
// (the checkpoint of the last one on disk), and a second run resumes from it.
TEST(TrainArch, EveryVisionModelTrainsAndResumesOnSyntheticData) {
  for (const char* arch :
       {"mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16"}) {
    SCOPED_TRACE(arch);
    TempDir dir;
    const std::string common =
        std::string(" --data synthetic --synthetic-size 8 --num-classes 5 --image-size 32 --epochs 2") +
        " --device cpu --batch-size 4 --progress off --no-tensorboard --arch " + arch + " --checkpoint-dir " +
        dir.file("run");
    auto r = run_train("--max-steps 2" + common);
    ASSERT_EQ(exit_code(r), 0) << r.output;
    EXPECT_NE(r.output.find("done: 2 steps"), std::string::npos) << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir.file("run/checkpoint-000000002.safetensors"))) << r.output;
    auto resumed = run_train("--max-steps 3 --resume auto" + common);
    ASSERT_EQ(exit_code(resumed), 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  }
}

}  // namespace
}  // namespace nabla::testing
