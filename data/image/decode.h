// Public header. Image decoding for the data path: JPEG through libjpeg-turbo's TurboJPEG API,
// PNG (optionally) through libpng, always to 8-bit RGB.
//
// Decoding is split in two so the caller can plan before it pays:
//   1. read_image_header() parses only the headers. It rejects empty, unknown and oversized
//      images (width * height above DecodeOptions::max_pixels) before any pixel buffer exists.
//   2. decode_image() decodes at a DCT scale factor (1/8 .. 1 for JPEG; see choose_jpeg_scale),
//      so a crop that will be shrunk to 224x224 anyway is decoded at the smallest size that still
//      covers it. This is the biggest CPU saving of the JPEG path (docs/design/data.md).
//
// Progressive JPEGs stop after 500 scans (libjpeg-turbo's own TJFLAG_LIMITSCANS bound), so a
// crafted file cannot make the decoder spin. Grayscale and CMYK JPEGs come out as
// RGB. Errors throw nabla::Error with a message that says what was wrong; the dataset adds the
// sample index and path (DataError).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nabla::data {

// What to do with PNG bytes (detected by their magic, whatever the file is called). ImageNet's
// train set has one PNG named .JPEG; torchvision (through PIL) decodes it.
enum class PngPolicy {
  reject,  // raise an error naming the file as a PNG
  decode,  // decode it through libpng (no DCT scaling: PNG has none)
};

// What to do with a JPEG whose entropy-coded data is damaged (a bad Huffman code, a marker inside
// a scan): libjpeg decodes what it can and fills the rest (Note [JPEG warnings]).
enum class CorruptDataPolicy {
  warn,   // keep the image; DecodedImage::corrupt_data says what was wrong (ImageFolder logs it)
  error,  // raise an error naming the problem, so OnBadSample applies to the file
};

struct DecodeOptions {
  // Largest width * height accepted; checked from the header, before allocating. The default is
  // PIL's decompression-bomb limit (2 * 89,478,485 pixels).
  int64_t max_pixels = 178'956'970;
  PngPolicy png = PngPolicy::decode;
  // Decode JPEGs at a reduced DCT scale when the crop allows it. Off: always full size, which is
  // torchvision's exact geometry (used by the parity tests) but several times slower.
  bool dct_scaling = true;
  CorruptDataPolicy corrupt_data = CorruptDataPolicy::warn;
};

enum class ImageFormat { jpeg, png };

struct ImageHeader {
  ImageFormat format = ImageFormat::jpeg;
  int width = 0;
  int height = 0;
  // A sequential, Huffman-coded, 8-bit YCbCr or grayscale JPEG: what the GPU decoder takes
  // (DataLoaderOptions::defer_decode, data/cuda/gpu_jpeg.h). Progressive, arithmetic-coded, 12-bit, RGB and
  // CMYK JPEGs and PNGs are decoded on the CPU.
  bool gpu_decodable = false;
};

// A DCT scale factor num/denom (libjpeg-turbo offers n/8 for n = 1..16).
struct ScaleFactor {
  int num = 1;
  int denom = 1;
  double value() const { return static_cast<double>(num) / denom; }
  // The decoded size of `dimension` pixels at this factor (TurboJPEG's TJSCALED: rounds up).
  int scaled(int dimension) const { return (dimension * num + denom - 1) / denom; }
};

// A decoded RGB image, height x width x 3, and the factor it was decoded at.
struct DecodedImage {
  std::vector<uint8_t> pixels;  // (H, W, 3)
  int width = 0;
  int height = 0;
  ScaleFactor scale;
  // libjpeg's first warning about damaged entropy-coded data; empty when the data was whole.
  std::string corrupt_data;
};

// Reads only the headers. Throws nabla::Error for empty input, bytes that are neither JPEG nor
// PNG, a PNG under PngPolicy::reject, a corrupt header, or more than max_pixels pixels.
ImageHeader read_image_header(std::span<const uint8_t> bytes, const DecodeOptions& options = {});

// The smallest factor <= 1 that TurboJPEG offers whose scaled image still has at least
// `need_width` x `need_height` pixels across a region that is `region_width` x `region_height`
// pixels at full size. A region already smaller than what is needed gets 1 (never upscale in
// the DCT; bilinear does that).
ScaleFactor choose_jpeg_scale(double region_width, double region_height, double need_width,
                              double need_height);

// Decodes to RGB at `scale` (ignored for PNG, which always decodes at 1). Reuses `out`'s buffer.
// Throws nabla::Error on a truncated file or data libjpeg cannot decode; damaged but decodable
// data only sets out.corrupt_data (the caller applies DecodeOptions::corrupt_data).
void decode_image(std::span<const uint8_t> bytes, const ImageHeader& header, ScaleFactor scale,
                  DecodedImage& out);

// Throws when `image` has corrupt data and options.corrupt_data is CorruptDataPolicy::error.
void apply_corrupt_data_policy(const DecodedImage& image, const DecodeOptions& options);

// Header + full-size decode in one call, for tools and tests; applies options.corrupt_data.
DecodedImage decode_image(std::span<const uint8_t> bytes, const DecodeOptions& options = {});

}  // namespace nabla::data
