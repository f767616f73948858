// bench/pytorch/torch_decode.py, PyTorch's side of `nabla-bench data --decode gpu` (issue 47):
// run here on the CPU (Debian's torch 1.13 and torchvision 0.14, `--device cpu`) over a few JPEGs
// PIL writes, every path and worker count giving one row that counts every image. The GPU
// comparison itself runs on the GPU machine (scripts/gpu/compile-call.sh, part decode).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "apps_test_util.h"
#include "test_paths.h"

namespace nabla::bench {
namespace {

using nabla::testing::run_command;
using nabla::testing::TempDir;

constexpr const char* kPython = "/usr/bin/python3";

TEST(TorchDecodeScript, EveryPathCountsEveryImageOnTheCpu) {
  if (run_command(std::string(kPython) + " -c 'import torch, torchvision, PIL' 2>/dev/null").status != 0) {
    GTEST_SKIP() << kPython << " has no torch/torchvision/PIL";
  }
  TempDir dir;
  // Seven JPEGs of random sizes in two class folders, random pixels (a fresh seed each run).
  const std::string make =
      std::string(kPython) + " -c \"import os, random\nfrom PIL import Image\nfor i in range(7):\n" +
      "  d = os.path.join('" + dir.path().string() + "', 'c' + str(i % 2)); os.makedirs(d, exist_ok=True)\n" +
      "  w, h = random.randint(230, 300), random.randint(230, 300)\n" +
      "  Image.frombytes('RGB', (w, h), os.urandom(w * h * 3)).save(os.path.join(d, f'{i}.jpg'), "
      "quality=92)\"";
  ASSERT_EQ(run_command(make).status, 0);
  const std::string script = nabla::testing::source_file("bench/pytorch/torch_decode.py").string();
  const auto result = run_command(std::string(kPython) + " " + script + " --root " + dir.path().string() +
                                  " --device cpu --batch-size 3 --workers 0,2 --repeat 2 2>&1");
  ASSERT_EQ(result.status, 0) << result.output;
  std::istringstream lines(result.output);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(rows.size(), 6u) << result.output;  // the header, nvjpeg, then two paths per worker count
  EXPECT_EQ(rows[0]["jpegs"], 7);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["images"], 14) << rows[i].dump();  // 7 files, twice
    EXPECT_GT(rows[i]["img_s"].get<double>(), 0.0) << rows[i].dump();
  }
  EXPECT_EQ(rows[1]["path"], "nvjpeg");
  EXPECT_EQ(rows[5]["path"], "dataloader");
  EXPECT_EQ(rows[5]["workers"], 2);
}

TEST(TorchDecodeScript, AFolderWithoutJpegsIsAClearError) {
  if (run_command(std::string(kPython) + " -c 'import torch' 2>/dev/null").status != 0) GTEST_SKIP();
  TempDir dir;
  const std::string script = nabla::testing::source_file("bench/pytorch/torch_decode.py").string();
  const auto result =
      run_command(std::string(kPython) + " " + script + " --root " + dir.path().string() + " 2>&1");
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.output.find("no .jpg or .jpeg files under"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace nabla::bench
