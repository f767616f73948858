// --config FILE: JSON and TOML files fill the flags they name, command-line flags win, key spellings
// map to flag names, and unknown keys, bad JSON and null values are errors that name the problem.
// The effective configuration written back as JSON reads in again to the same values.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "apps_test_util.h"
#include "fuzz/config_fuzz_body.h"
#include "fuzz/mutate.h"
#include "nabla/apps/train_support/config_file.h"
#include "test_util.h"

namespace ts = nabla::train_support;
using nabla::testing::TempDir;
using nabla::testing::write_file;

namespace {

// A slice of nabla-train's flags, one of each kind: int, double, string with a fixed set, flag, list.
struct Flags {
  CLI::App app{"test"};
  int batch_size = 256;
  double lr = 0.1;
  std::string amp = "off";
  bool nesterov = false;
  std::vector<int> milestones;
  Flags() {
    app.add_option("--batch-size", batch_size, "per GPU")->capture_default_str();
    app.add_option("--lr", lr, "learning rate")->capture_default_str();
    app.add_option("--amp", amp, "precision")
        ->check(CLI::IsMember({"off", "fp16", "bf16"}))
        ->capture_default_str();
    app.add_flag("--nesterov", nesterov, "Nesterov momentum");
    app.add_option("--milestones", milestones, "step schedule epochs");
    ts::add_config_option(app);
  }
  void parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11's vector form takes the arguments reversed
    app.parse(args);
  }
};

}  // namespace

TEST(ConfigFile, JsonFillsFlagsAndTheCommandLineWins) {
  TempDir dir;
  write_file(
      dir.file("run.json"),
      R"({"batch_size": 64, "--lr": 0.35, "amp": "bf16", "nesterov": true, "milestones": [30, 60, 80]})");
  Flags f;
  f.parse({"--config", dir.file("run.json"), "--lr", "0.7"});
  EXPECT_EQ(f.batch_size, 64);
  EXPECT_DOUBLE_EQ(f.lr, 0.7);  // the flag, not the file's 0.35
  EXPECT_EQ(f.amp, "bf16");
  EXPECT_TRUE(f.nesterov);
  EXPECT_EQ(f.milestones, (std::vector<int>{30, 60, 80}));
}

TEST(ConfigFile, TomlIsReadByCli11AndMappedTheSameWay) {
  TempDir dir;
  write_file(dir.file("run.toml"),
             "# a comment\nbatch-size = 32\nlr = 0.05\namp = \"fp16\"\nnesterov = true\n"
             "milestones = [3, 6]\n");
  Flags f;
  f.parse({"--config", dir.file("run.toml"), "--batch-size", "8"});
  EXPECT_EQ(f.batch_size, 8);
  EXPECT_DOUBLE_EQ(f.lr, 0.05);
  EXPECT_EQ(f.amp, "fp16");
  EXPECT_TRUE(f.nesterov);
  EXPECT_EQ(f.milestones, (std::vector<int>{3, 6}));
}

TEST(ConfigFile, WithoutConfigTheDefaultsStay) {
  Flags f;
  f.parse({"--amp", "fp16"});
  EXPECT_EQ(f.batch_size, 256);
  EXPECT_DOUBLE_EQ(f.lr, 0.1);
  EXPECT_EQ(f.amp, "fp16");
}

TEST(ConfigFile, BadFilesAreNamedErrors) {
  TempDir dir;
  auto message = [&](const std::string& content) -> std::string {
    write_file(dir.file("c.json"), content);
    Flags f;
    try {
      f.parse({"--config", dir.file("c.json")});
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "<no error>";
  };
  std::string unknown = message(R"({"batchsize": 3})");
  EXPECT_NE(unknown.find("unknown key 'batchsize'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("did you mean 'batch-size'"), std::string::npos) << unknown;
  EXPECT_NE(message(R"({"lr": 0.1,})").find("invalid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"lr": null})").find("key 'lr' has a null value"), std::string::npos);
  EXPECT_NE(message(R"({"amp": "fp8"})").find("fp8"), std::string::npos);  // CLI11's own check still runs
  // Found by config_fuzz: a number beyond double's range was an uncaught nlohmann exception.
  EXPECT_NE(message(R"({"lr": 5.31e309})").find("invalid JSON"), std::string::npos);
  Flags f;
  EXPECT_THROW(f.parse({"--config", dir.file("missing.json")}), CLI::FileError);
}

TEST(ConfigFile, WrittenConfigReadsBackToTheSameValues) {
  TempDir dir;
  Flags first;
  first.parse({"--batch-size", "48", "--amp", "bf16", "--nesterov", "--milestones", "5", "9"});
  std::string written = first.app.config_to_str(/*default_also=*/true, /*write_description=*/false);
  auto json = nlohmann::json::parse(written);
  EXPECT_EQ(json.at("batch-size"), 48);
  EXPECT_EQ(json.at("lr"), 0.1);  // a default, typed as a number
  EXPECT_EQ(json.at("nesterov"), true);
  EXPECT_EQ(json.at("milestones"), nlohmann::json::array({5, 9}));
  EXPECT_FALSE(json.contains("config"));
  write_file(dir.file("effective.json"), written);
  Flags second;
  second.parse({"--config", dir.file("effective.json")});
  EXPECT_EQ(second.batch_size, 48);
  EXPECT_DOUBLE_EQ(second.lr, 0.1);
  EXPECT_EQ(second.amp, "bf16");
  EXPECT_TRUE(second.nesterov);
  EXPECT_EQ(second.milestones, (std::vector<int>{5, 9}));
}

// Found by config_fuzz: a value that is not UTF-8 (a Linux path may be any bytes) made writing the
// effective configuration throw; it is written with U+FFFD in place of the bad bytes.
TEST(ConfigFile, ValuesThatAreNotUtf8AreWrittenWithReplacementCharacters) {
  Flags f;
  f.app.add_option("--data", f.amp);  // any string flag
  f.parse({"--data", "runs/caf\xe9"});
  const std::string written = f.app.config_to_str(/*default_also=*/false, /*write_description=*/false);
  EXPECT_EQ(nlohmann::json::parse(written).at("data"), "runs/caf\xef\xbf\xbd");
}

// The fuzz target's body (tests/fuzz/config_fuzz_body.h) over seeded mutations of its JSON and TOML
// seeds: each parses or throws CLI::Error / nabla::Error, never anything else.
TEST(ConfigFile, FuzzBodyReturnsOrThrowsOnMutatedSeeds) {
  std::mt19937_64 rng(nabla::testing::test_seed());
  auto run = [](const std::string& b) {
    return nabla::fuzz::config_fuzz_one(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  };
  int parsed = 0, total = 0;
  for (const auto& [name, seed] : nabla::fuzz::config_fuzz_seeds()) {
    EXPECT_TRUE(run(seed)) << name;
    for (int i = 0; i < 400; ++i, ++total) parsed += run(nabla::fuzz::mutate(seed, i, rng)) ? 1 : 0;
  }
  EXPECT_LT(parsed, total);
}
