// The checkpoint directory: names, keep-last pruning (best kept), resume from the newest valid file
// with partial/corrupt/mislabelled ones skipped and reported, and --resume's three forms.
#include <gtest/gtest.h>

#include <filesystem>

#include "apps_test_util.h"
#include "nabla/apps/train_support/checkpoint_dir.h"
#include "test_util.h"

namespace nb = nabla;
namespace ts = nabla::train_support;
namespace fs = std::filesystem;
using nabla::testing::random_input;
using nabla::testing::read_file;
using nabla::testing::TempDir;
using nabla::testing::test_seed;
using nabla::testing::write_file;

namespace {

std::map<std::string, nb::Tensor> random_state(uint64_t seed) {
  return {{"model.fc.weight", random_input({3, 4}, seed, nb::kFloat32)},
          {"optimizer.step", nb::tensor<int64_t>({static_cast<int64_t>(seed % 1000)}, {1})}};
}

}  // namespace

TEST(CheckpointDir, SaveDueEveryNSteps) {
  std::vector<int64_t> due;
  for (int64_t step = 0; step <= 10; ++step)
    if (ts::save_due(step, 4)) due.push_back(step);
  EXPECT_EQ(due, (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(ts::save_due(8, 0));
  EXPECT_FALSE(ts::save_due(8, -1));
}

TEST(CheckpointDir, KeepsTheLastKAndTheBest) {
  TempDir dir;
  ts::CheckpointDir ckpt(dir.file("ck"), {.keep_last = 2});
  EXPECT_EQ(fs::path(ckpt.path_for_step(1200)).filename(), "checkpoint-000001200.safetensors");
  for (int64_t step : {100, 200, 300, 400}) ckpt.save(step, random_state(test_seed() + step));
  ckpt.save_best(200, random_state(test_seed()));
  EXPECT_EQ(ckpt.steps_on_disk(), (std::vector<int64_t>{300, 400}));
  EXPECT_TRUE(fs::exists(ckpt.best_path()));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.file("ck"))) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"best.safetensors", "checkpoint-000000300.safetensors",
                                             "checkpoint-000000400.safetensors"}));  // no temp files left
  EXPECT_NABLA_ERROR(ts::CheckpointDir(dir.file("x"), {.keep_last = -1}), "keep_last", "-1");
}

TEST(CheckpointDir, ResumeLoadsTheNewestValidAndSkipsBrokenOnes) {
  TempDir dir;
  ts::CheckpointDir ckpt(dir.path().string());
  ckpt.save(100, random_state(test_seed() + 1), {{"epoch", "1"}});
  ckpt.save(200, random_state(test_seed() + 2), {{"epoch", "2"}});
  // Newer but broken: cut short, garbage, and a valid file under the wrong step's name.
  std::string good = read_file(ckpt.path_for_step(200));
  write_file(ckpt.path_for_step(300), good.substr(0, good.size() / 2));
  write_file(ckpt.path_for_step(400), "not a checkpoint");
  fs::copy_file(ckpt.path_for_step(100), ckpt.path_for_step(500));
  // A leftover temp file of an interrupted save is not a candidate at all.
  write_file(ckpt.path_for_step(600) + ".tmp.123", good);

  auto found = ckpt.load_latest_valid();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 200);
  EXPECT_EQ(found->path, ckpt.path_for_step(200));
  EXPECT_EQ(found->file.metadata.at("epoch"), "2");
  EXPECT_EQ(found->file.metadata.at(ts::kStepMetadataKey), "200");
  auto expected = random_state(test_seed() + 2);
  for (const auto& [name, t] : expected)
    EXPECT_TRUE(nb::testing::all_close(found->file.tensors.at(name), t, 0, 0)) << name;
  ASSERT_EQ(found->skipped.size(), 3u);
  EXPECT_NE(found->skipped[0].find("checkpoint-000000500"), std::string::npos);
  EXPECT_NE(found->skipped[0].find("records step '100', not 500"), std::string::npos) << found->skipped[0];
  EXPECT_NE(found->skipped[1].find("checkpoint-000000400"), std::string::npos);
  EXPECT_NE(found->skipped[2].find("checkpoint-000000300"), std::string::npos);
}

TEST(CheckpointDir, ResumeSpecAutoFileOrNothing) {
  TempDir dir;
  EXPECT_FALSE(ts::resume_checkpoint("", dir.path().string()).has_value());
  EXPECT_FALSE(ts::resume_checkpoint("auto", dir.file("not-yet")).has_value());  // fresh run
  EXPECT_FALSE(ts::resume_checkpoint("auto", dir.path().string()).has_value());  // empty dir
  ts::CheckpointDir ckpt(dir.path().string());
  ckpt.save(7, random_state(test_seed()));
  ckpt.save(9, random_state(test_seed() + 9));
  auto latest = ts::resume_checkpoint("auto", dir.path().string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 9);
  auto named = ts::resume_checkpoint(ckpt.path_for_step(7), "");
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->step, 7);
  EXPECT_TRUE(nb::testing::all_close(named->file.tensors.at("model.fc.weight"),
                                     random_state(test_seed()).at("model.fc.weight"), 0, 0));
  EXPECT_NABLA_ERROR(ts::resume_checkpoint(dir.file("nope.safetensors"), ""), "--resume", "nope.safetensors",
                     "'auto'");
  write_file(dir.file("bad.safetensors"), "xx");
  EXPECT_THROW(ts::resume_checkpoint(dir.file("bad.safetensors"), ""), nb::Error);
}
