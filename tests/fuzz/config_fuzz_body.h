// The body shared by the libFuzzer target (config_fuzz.cpp) and the corpus test that runs in CI
// (tests/apps/config_file_test.cpp): bytes as the file `nabla-train --config FILE` reads (JSON, or
// TOML through CLI11), parsed into flags of each kind nabla-train has. CLI11 reports its parse
// errors as CLI::Error (nabla-train prints them and exits 2); that and nabla::Error are the only
// acceptable failures; anything else is a bug.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "nabla/apps/train_support/config_file.h"
#include "nabla/core/error.h"

namespace nabla::fuzz {

// Returns true when the bytes parsed as a configuration.
inline bool config_fuzz_one(const uint8_t* data, size_t size) {
  // CLI11 reads configuration from a file: one per process, rewritten for every input and
  // removed when the process exits.
  struct ScratchFile {
    std::string path = "/tmp/nabla-config-fuzz-" + std::to_string(::getpid());
    ~ScratchFile() { std::remove(path.c_str()); }
  };
  static const ScratchFile scratch;
  const std::string& path = scratch.path;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  CLI::App app{"fuzz"};
  int batch_size = 256;
  double lr = 0.1;
  std::string amp = "off";
  bool nesterov = false;
  std::vector<int> milestones;
  std::vector<std::string> names;
  app.add_option("--batch-size", batch_size)->capture_default_str();
  app.add_option("--lr", lr)->capture_default_str();
  app.add_option("--amp", amp)->check(CLI::IsMember({"off", "fp16", "bf16"}));
  app.add_flag("--nesterov", nesterov);
  app.add_option("--milestones", milestones);
  app.add_option("--names", names);
  train_support::add_config_option(app);
  try {
    app.parse(std::vector<std::string>{path, "--config"});  // CLI11's vector form is reversed
    (void)app.config_to_str(/*default_also=*/true);
    return true;
  } catch (const CLI::Error&) {
    return false;
  } catch (const nabla::Error&) {
    return false;
  }
}

// A JSON and a TOML configuration naming every flag kind: the seeds.
inline std::vector<std::pair<std::string, std::string>> config_fuzz_seeds() {
  return {{"run.json", R"({"batch_size": 64, "--lr": 0.35, "amp": "bf16", "nesterov": true,)"
                       R"( "milestones": [30, 60, 80], "names": ["a", "b"]})"},
          {"run.toml",
           "# a comment\nbatch-size = 32\nlr = 5e-2\namp = \"fp16\"\nnesterov = true\n"
           "milestones = [1, 2]\nnames = [\"x\"]\n"}};
}

}  // namespace nabla::fuzz
