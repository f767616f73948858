// JPEG/PNG decoding against PIL's decode of the same files, the DCT scale choice, and every bad
// input (empty, not an image, corrupt, truncated, PNG named .JPEG, too many pixels).
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "data/image_test_util.h"
#include "nabla/data/image/decode.h"
#include "test_util.h"

namespace nabla::data {
namespace {

using nabla::testing::byte_diff;
using nabla::testing::read_bytes;

// Fixtures made by PIL (tests/data/image_reference.py) from a random image, once per build
// (Python start-up costs seconds; see ImageFixtures), seeded from the suite's name.
class DecodeFixtures : public ::testing::Test {
 protected:
  void SetUp() override {
    NABLA_REQUIRE_TORCHVISION();
    if (!dir_) {
      dir_ = std::make_unique<nabla::testing::ImageFixtures>(std::hash<std::string>{}("DecodeFixtures") %
                                                             100000);
    }
  }
  static void TearDownTestSuite() { dir_.reset(); }
  std::vector<uint8_t> bytes(const std::string& name) { return read_bytes(*dir_ / name); }
  static std::unique_ptr<nabla::testing::ImageFixtures> dir_;
};
std::unique_ptr<nabla::testing::ImageFixtures> DecodeFixtures::dir_;

// PIL (python3-pil) links the same system libjpeg-turbo, so a plain decode agrees to the byte;
// the margin only allows for a PIL built against another libjpeg.
void expect_matches_pil(const DecodedImage& image, const std::vector<uint8_t>& pil, int max_diff) {
  ASSERT_EQ(image.width, 259);
  ASSERT_EQ(image.height, 173);
  auto diff = byte_diff(image.pixels, pil);
  EXPECT_LE(diff.max, max_diff);
  EXPECT_LT(diff.mean, 0.5);
}

TEST_F(DecodeFixtures, BaselineRgbJpegMatchesPil) {
  expect_matches_pil(decode_image(bytes("rgb.jpg")), bytes("rgb.rgb"), 2);
}

TEST_F(DecodeFixtures, ProgressiveJpegMatchesPil) {
  expect_matches_pil(decode_image(bytes("progressive.jpg")), bytes("progressive.rgb"), 2);
}

TEST_F(DecodeFixtures, GrayscaleJpegBecomesRgbWithEqualChannels) {
  auto image = decode_image(bytes("gray.jpg"));
  expect_matches_pil(image, bytes("gray.rgb"), 2);
  for (size_t p = 0; p < image.pixels.size(); p += 3) {
    ASSERT_EQ(image.pixels[p], image.pixels[p + 1]);
    ASSERT_EQ(image.pixels[p], image.pixels[p + 2]);
  }
}

TEST_F(DecodeFixtures, AdobeCmykJpegConvertsToRgbLikePil) {
  expect_matches_pil(decode_image(bytes("cmyk.jpg")), bytes("cmyk.rgb"), 2);
}

TEST_F(DecodeFixtures, PngDecodesExactlyOrIsRejectedAsThePolicySays) {
  auto png = bytes("image.png");
  auto image = decode_image(png, {.png = PngPolicy::decode});
  EXPECT_EQ(image.pixels, bytes("image.rgb"));  // lossless
  EXPECT_NABLA_ERROR(decode_image(png, {.png = PngPolicy::reject}), "PNG image, not a JPEG", "PngPolicy");
}

TEST_F(DecodeFixtures, PngAlphaIsDroppedLikePilConvertRgb) {
  EXPECT_EQ(decode_image(bytes("alpha.png")).pixels, bytes("alpha.rgb"));
}

TEST_F(DecodeFixtures, ScaledDecodeHasTurboJpegSizeAndAveragesTheFullImage) {
  auto jpeg = bytes("rgb.jpg");
  auto header = read_image_header(jpeg);
  DecodedImage half;
  decode_image(jpeg, header, {.num = 1, .denom = 2}, half);
  EXPECT_EQ(half.width, 130);  // ceil(259 / 2)
  EXPECT_EQ(half.height, 87);  // ceil(173 / 2)
  // Reference: 2x2 box average of the full-size decode (what IDCT scaling approximates).
  auto full = decode_image(jpeg);
  double sum = 0;
  int64_t count = 0;
  for (int y = 0; y + 1 < full.height && y / 2 < half.height; y += 2) {
    for (int x = 0; x + 1 < full.width; x += 2) {
      for (int c = 0; c < 3; ++c) {
        auto at = [&](int yy, int xx) { return full.pixels[(size_t(yy) * full.width + xx) * 3 + c]; };
        double box = (at(y, x) + at(y, x + 1) + at(y + 1, x) + at(y + 1, x + 1)) / 4.0;
        sum += std::abs(box - half.pixels[(size_t(y / 2) * half.width + x / 2) * 3 + c]);
        ++count;
      }
    }
  }
  EXPECT_LT(sum / double(count), 2.0);
}

TEST_F(DecodeFixtures, TruncatedJpegIsAnErrorNotAGrayImage) {
  auto jpeg = bytes("rgb.jpg");
  jpeg.resize(jpeg.size() / 2);
  auto header = read_image_header(jpeg);  // the header is intact
  DecodedImage out;
  EXPECT_NABLA_ERROR(decode_image(jpeg, header, {}, out), "truncated JPEG");
}

// Note [JPEG warnings] (data/image/detail/jpeg_decode.h): damaged scan data still decodes, at
// full size, but says so; under CorruptDataPolicy::error it is an error naming the problem.
TEST_F(DecodeFixtures, DamagedScanDataIsReportedAndAnErrorWhenStrict) {
  const auto jpeg = bytes("rgb.jpg");
  const auto clean = decode_image(jpeg);
  EXPECT_EQ(clean.corrupt_data, "");
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
  };
  for (const auto& [name, damaged] :
       {Case{"bad Huffman code", nabla::testing::with_bad_huffman_code(jpeg)},
        Case{"marker in the scan", nabla::testing::with_marker_in_scan(jpeg)}}) {
    SCOPED_TRACE(name);
    auto image = decode_image(damaged);
    EXPECT_EQ(image.width, 259);
    EXPECT_EQ(image.height, 173);
    EXPECT_NE(image.corrupt_data.find("Corrupt JPEG data"), std::string::npos) << image.corrupt_data;
    EXPECT_NE(image.pixels, clean.pixels);  // the damage shows: the rest of the scan is lost
    EXPECT_NABLA_ERROR(decode_image(damaged, {.corrupt_data = CorruptDataPolicy::error}), "corrupt JPEG data",
                       image.corrupt_data.c_str(), "DecodeOptions::corrupt_data");
  }
}

// The harmless warning of real ImageNet files leaves the image whole, as PIL decodes it.
TEST_F(DecodeFixtures, ExtraneousBytesBeforeAMarkerAreAccepted) {
  const auto jpeg = bytes("rgb.jpg");
  auto image =
      decode_image(nabla::testing::with_extraneous_bytes(jpeg), {.corrupt_data = CorruptDataPolicy::error});
  EXPECT_EQ(image.corrupt_data, "");
  EXPECT_EQ(image.pixels, decode_image(jpeg).pixels);
}

// Note [Fresh handle after an error] in data/image/jpeg_decode.cpp: a failed header read must not
// leave the thread's decoder in a state that breaks the next, valid file.
TEST_F(DecodeFixtures, AFailedFileDoesNotBreakTheNextOneOnTheSameThread) {
  auto jpeg = bytes("rgb.jpg");
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + 300);  // ends inside the tables
  EXPECT_THROW(read_image_header(cut), nabla::Error);
  std::fill(jpeg.begin() + 4, jpeg.begin() + 200, uint8_t{0x5A});
  EXPECT_THROW(read_image_header(jpeg), nabla::Error);
  expect_matches_pil(decode_image(bytes("progressive.jpg")), bytes("progressive.rgb"), 2);
  expect_matches_pil(decode_image(bytes("rgb.jpg")), bytes("rgb.rgb"), 2);
}

TEST_F(DecodeFixtures, CorruptJpegHeaderIsAnError) {
  auto jpeg = bytes("rgb.jpg");
  std::fill(jpeg.begin() + 4, jpeg.begin() + 200, uint8_t{0x5A});  // keep SOI, destroy the markers
  EXPECT_NABLA_ERROR(read_image_header(jpeg), "corrupt JPEG header");
}

TEST_F(DecodeFixtures, PixelLimitRejectsFromTheHeaderBeforeDecoding) {
  auto jpeg = bytes("rgb.jpg");
  EXPECT_NABLA_ERROR(read_image_header(jpeg, {.max_pixels = int64_t{259} * 173 - 1}), "259x173",
                     "above the limit");
  EXPECT_EQ(read_image_header(jpeg, {.max_pixels = int64_t{259} * 173}).width, 259);
  // A header that claims 65000x65000 pixels: rejected by the default limit without allocating
  // the 12 GB its pixels would need. The SOF0 marker (ff c0) holds height then width.
  for (size_t i = 0; i + 8 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 5] = jpeg[i + 7] = 0xFD;
      jpeg[i + 6] = jpeg[i + 8] = 0xE8;
      break;
    }
  }
  EXPECT_NABLA_ERROR(read_image_header(jpeg), "65000x65000", "above the limit");
}

TEST(ImageDecode, EmptyAndNonImageBytesAreErrors) {
  std::vector<uint8_t> empty;
  EXPECT_NABLA_ERROR(read_image_header(empty), "empty file");
  std::mt19937 rng(static_cast<uint32_t>(nabla::testing::test_seed()));
  std::vector<uint8_t> noise(512);
  for (auto& b : noise) b = static_cast<uint8_t>(rng() % 200 + 1);  // never starts ff d8 / 89 P
  EXPECT_NABLA_ERROR(read_image_header(noise), "not a JPEG or PNG image");
  std::vector<uint8_t> soi_only = {0xFF, 0xD8, 0xFF};
  EXPECT_NABLA_ERROR(read_image_header(soi_only), "corrupt JPEG header");
  std::vector<uint8_t> png_magic_only = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0};
  EXPECT_NABLA_ERROR(read_image_header(png_magic_only), "corrupt PNG header");
}

// Hand-computed from libjpeg-turbo's factors n/8: the smallest with region * n/8 >= need.
TEST(ImageDecode, ScaleChoiceIsTheSmallestFactorThatCoversTheCrop) {
  auto pick = [](double w, double h, double need) {
    auto f = choose_jpeg_scale(w, h, need, need);
    return std::pair(f.num * 8 / f.denom, 8);  // as eighths
  };
  EXPECT_EQ(pick(500, 375, 224), std::pair(5, 8));    // 375 * 5/8 = 234 >= 224 > 375 / 2
  EXPECT_EQ(pick(2000, 1800, 224), std::pair(1, 8));  // 1800 / 8 = 225
  EXPECT_EQ(pick(1700, 1700, 224), std::pair(2, 8));  // 1700 / 8 = 212 < 224
  EXPECT_EQ(pick(448, 448, 224), std::pair(4, 8));    // exactly half
  EXPECT_EQ(pick(100, 300, 224), std::pair(8, 8));    // smaller than needed: never below 1
  EXPECT_EQ(pick(300, 100, 224), std::pair(8, 8));
}

}  // namespace
}  // namespace nabla::data
