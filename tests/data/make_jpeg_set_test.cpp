// tools/make_jpeg_set.py --imagenet (issue 47): ImageNet-sized files that nabla's decoder reads,
// with the sizes, layout and bytes the script promises, read back from the files themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "apps/apps_test_util.h"
#include "data/image_test_util.h"
#include "nabla/data/image/decode.h"
#include "test_util.h"

namespace nabla::data {
namespace {

namespace fs = std::filesystem;
using nabla::testing::read_bytes;

struct Set {
  int files = 0;
  double mean_bytes = 0;
};

// Makes a set with `flags` under `dir`; every file must decode, with a long side of 300-2000.
Set make_and_read(const nabla::testing::TempDir& dir, const std::string& flags) {
  const auto made = nabla::testing::run_command(
      "/usr/bin/python3 " + nabla::testing::source_file("tools/make_jpeg_set.py").string() +
      " --imagenet --classes 3 --per-photo 6 --val-per-photo 1 --out " + dir.file("set") + " " + flags +
      " 2>&1");
  if (made.status != 0) {
    ADD_FAILURE() << made.output;
    return {};
  }
  Set set;
  for (const auto& entry : fs::recursive_directory_iterator(dir.file("set"))) {
    if (entry.path().extension() != ".JPEG") continue;
    const std::vector<uint8_t> bytes = read_bytes(entry.path().string());
    const DecodedImage image = decode_image(bytes);
    const int long_side = std::max(image.width, image.height);
    EXPECT_GE(long_side, 300) << entry.path();
    EXPECT_LE(long_side, 2000) << entry.path();
    ++set.files;
    set.mean_bytes += static_cast<double>(bytes.size());
  }
  if (set.files > 0) set.mean_bytes /= set.files;
  return set;
}

TEST(MakeJpegSet, ImageNetSizedFilesDecodeAndTheGrainAddsTheBytes) {
  if (!fs::exists("/usr/share/backgrounds/mate/nature"))
    GTEST_SKIP() << "no Debian mate-backgrounds photos (scripts/install-deps.sh installs them)";
  const nabla::testing::TempDir with_grain, without;
  const Set grainy = make_and_read(with_grain, "");
  const Set smooth = make_and_read(without, "--grain 0");
  // 3 photos x (6 train + 1 val), in the ImageNet layout.
  EXPECT_EQ(grainy.files, 21);
  EXPECT_EQ(smooth.files, 21);
  EXPECT_TRUE(fs::exists(with_grain.file("set/train")) && fs::exists(with_grain.file("set/val")));
  // The same draws (one seed) with and without grain: the grain is what makes the files heavy.
  EXPECT_GT(grainy.mean_bytes, 1.5 * smooth.mean_bytes) << grainy.mean_bytes << " vs " << smooth.mean_bytes;
  EXPECT_GT(grainy.mean_bytes, 40'000.0);
}

TEST(MakeJpegSet, NegativeGrainIsAnError) {
  const nabla::testing::TempDir dir;
  const auto made = nabla::testing::run_command(
      "/usr/bin/python3 " + nabla::testing::source_file("tools/make_jpeg_set.py").string() +
      " --imagenet --classes 1 --per-photo 1 --val-per-photo 0 --grain -1 --out " + dir.file("set") +
      " 2>&1");
  EXPECT_NE(made.status, 0);
  EXPECT_NE(made.output.find("--grain must be at least 0, got -1"), std::string::npos) << made.output;
}

}  // namespace
}  // namespace nabla::data
