// The JPEG fuzz target's body (tests/fuzz/jpeg_fuzz_body.h) over seeded mutations of valid
// baseline, progressive, grayscale, CMYK and PNG files: bit flips, byte overwrites in the
// headers, truncations and insertions. Every input must decode or throw nabla::Error; never
// crash, hang or allocate what a header merely claims. The libFuzzer target explores further.
#include <gtest/gtest.h>

#include <random>

#include "data/image_test_util.h"
#include "fuzz/jpeg_fuzz_body.h"
#include "test_util.h"

namespace nabla {
namespace {

std::vector<uint8_t> mutate(std::vector<uint8_t> bytes, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  switch (rng() % 4) {
    case 0:  // a few bit flips anywhere
      for (int k = 0, n = 1 + int(rng() % 8); k < n; ++k)
        bytes[pick(bytes.size())] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1:  // overwrite bytes in the headers (markers, sizes, tables)
      for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k)
        bytes[pick(std::min<size_t>(bytes.size(), 700))] = uint8_t(rng());
      break;
    case 2:  // truncate
      bytes.resize(pick(bytes.size()));
      break;
    default:  // insert a run of random bytes
      bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(pick(bytes.size())), 1 + pick(64),
                   uint8_t(rng()));
      break;
  }
  return bytes;
}

TEST(ImageFuzz, MutatedImagesDecodeOrRaiseNablaError) {
  NABLA_REQUIRE_TORCHVISION();
  nabla::testing::ScratchDir dir;
  uint64_t seed = nabla::testing::test_seed();
  nabla::testing::run_image_reference("fixtures " + dir.path() + " " + std::to_string(seed % 100000));
  std::mt19937_64 rng(seed);
  int decoded = 0, rejected = 0;
  for (const char* name : {"rgb.jpg", "progressive.jpg", "gray.jpg", "cmyk.jpg", "image.png"}) {
    auto original = nabla::testing::read_bytes(dir / name);
    if (!fuzz::jpeg_fuzz_one(original.data(), original.size())) {
      try {  // show why
        data::SampleRandom random(data::SampleContext{});
        std::vector<uint8_t> slot(size_t{16} * 16 * 3);
        data::decode_transformed(original, data::imagenet_val_transform(16, 18), {}, random, slot);
      } catch (const nabla::Error& e) {
        ADD_FAILURE() << name << ": " << e.what();
      }
      FAIL() << name << " must decode unmutated";
    }
    for (int k = 0; k < 300; ++k) {
      auto bytes = mutate(original, rng);
      (fuzz::jpeg_fuzz_one(bytes.data(), bytes.size()) ? decoded : rejected) += 1;
    }
  }
  // Both outcomes occur: the mutations are neither all harmless nor all fatal.
  EXPECT_GT(decoded, 100);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace nabla
