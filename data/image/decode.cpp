// JPEG (libjpeg-turbo through the libjpeg API, detail/jpeg_decode.h, which also classifies its
// warnings: Note [JPEG warnings]) and PNG (libpng simplified API) decoding to RGB; see decode.h.
// TurboJPEG is used only for its list of DCT scaling factors.
#include "nabla/data/image/decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "nabla/core/error.h"
#include "nabla/data/image/detail/jpeg_decode.h"

namespace nabla::data {
namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool starts_with(std::span<const uint8_t> bytes, const uint8_t* magic, size_t n) {
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}
bool is_png(std::span<const uint8_t> bytes) {
  return starts_with(bytes, kPngMagic, 8);
}
bool is_jpeg(std::span<const uint8_t> bytes) {
  static constexpr uint8_t soi[3] = {0xFF, 0xD8, 0xFF};  // SOI, then the first marker
  return starts_with(bytes, soi, 3);
}

[[noreturn]] void fail(const std::string& message) {
  throw nabla::Error(message);
}

void check_size(const char* kind, int64_t width, int64_t height, const DecodeOptions& options) {
  if (width <= 0 || height <= 0) fail(fmt::format("{} has an empty size {}x{}", kind, width, height));
  if (width * height > options.max_pixels) {
    fail(fmt::format("{} is {}x{} = {} pixels, above the limit of {} pixels (DecodeOptions::max_pixels)",
                     kind, width, height, width * height, options.max_pixels));
  }
}

// Adobe CMYK JPEGs (Photoshop's, and every CMYK JPEG libjpeg writes) store inverted inks, so the
// decoder hands back i = 255 - ink. PIL reads them the same way (rawmode "CMYK;I") and converts
// with R = (255 - K) - (C * (255 - K)) / 255, rounded as its MULDIV255 does; we copy it exactly.
int muldiv255(int a, int b) {
  int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

void cmyk_to_rgb(const uint8_t* inverted_cmyk, int64_t pixels, uint8_t* rgb) {
  for (int64_t p = 0; p < pixels; ++p, inverted_cmyk += 4, rgb += 3) {
    int not_k = inverted_cmyk[3];  // 255 - K
    for (int c = 0; c < 3; ++c) {
      int ink = 255 - inverted_cmyk[c];
      rgb[c] = static_cast<uint8_t>(not_k - muldiv255(ink, not_k));
    }
  }
}

void decode_jpeg(std::span<const uint8_t> bytes, ScaleFactor scale, DecodedImage& out) {
  const detail::JpegHeaderInfo info = detail::read_jpeg_header(bytes);
  out.scale = scale;
  out.width = scale.scaled(info.width);
  out.height = scale.scaled(info.height);
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  const bool cmyk = info.cmyk;
  thread_local std::vector<uint8_t> cmyk_buffer;
  uint8_t* target = out.pixels.data();
  if (cmyk) {
    cmyk_buffer.resize(static_cast<size_t>(out.width) * out.height * 4);
    target = cmyk_buffer.data();
  }
  // Grayscale JPEGs decode straight to RGB (libjpeg replicates the channel). Errors, truncation
  // and damaged scans: Note [JPEG warnings] in detail/jpeg_decode.h.
  auto result = detail::decode_jpeg_pixels(bytes, {.scale_num = scale.num,
                                                   .scale_denom = scale.denom,
                                                   .cmyk = cmyk,
                                                   .out = target,
                                                   .width = out.width,
                                                   .height = out.height});
  out.corrupt_data = std::move(result.first_corrupt);
  if (cmyk) {
    cmyk_to_rgb(cmyk_buffer.data(), static_cast<int64_t>(out.width) * out.height, out.pixels.data());
    if (cmyk_buffer.capacity() > (size_t{64} << 20))
      std::vector<uint8_t>().swap(cmyk_buffer);  // rare: drop it
  }
}

void decode_png(std::span<const uint8_t> bytes, DecodedImage& out) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) == 0) {
    fail(std::string("corrupt PNG header: ") + image.message);
  }
  // Decode as RGBA and drop alpha ourselves: PIL's convert("RGB") drops it, while libpng's
  // simplified API would composite RGB output onto a background.
  image.format = PNG_FORMAT_RGBA;
  out.scale = {};
  out.corrupt_data.clear();
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  thread_local std::vector<uint8_t> rgba;
  rgba.resize(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, rgba.data(), 0, nullptr) == 0) {
    std::string message = image.message;
    png_image_free(&image);
    fail("corrupt or truncated PNG: " + message);
  }
  auto pixels = static_cast<size_t>(out.width) * static_cast<size_t>(out.height);
  out.pixels.resize(pixels * 3);
  for (size_t p = 0; p < pixels; ++p) {
    out.pixels[p * 3 + 0] = rgba[p * 4 + 0];
    out.pixels[p * 3 + 1] = rgba[p * 4 + 1];
    out.pixels[p * 3 + 2] = rgba[p * 4 + 2];
  }
  if (rgba.capacity() > (size_t{64} << 20)) std::vector<uint8_t>().swap(rgba);
}

}  // namespace

ImageHeader read_image_header(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  if (bytes.empty()) fail("empty file (0 bytes); expected a JPEG or PNG image");
  ImageHeader header;
  if (is_png(bytes)) {
    if (options.png == PngPolicy::reject) {
      fail("this is a PNG image, not a JPEG (PngPolicy::reject; use PngPolicy::decode to decode it)");
    }
    png_image image;
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    if (png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) == 0) {
      fail(std::string("corrupt PNG header: ") + image.message);
    }
    header = {.format = ImageFormat::png,
              .width = static_cast<int>(image.width),
              .height = static_cast<int>(image.height)};
    png_image_free(&image);
    check_size("PNG image", header.width, header.height, options);
    return header;
  }
  if (!is_jpeg(bytes)) {
    std::string head;
    for (size_t i = 0; i < std::min<size_t>(bytes.size(), 4); ++i) head += fmt::format("{:02x} ", bytes[i]);
    fail(fmt::format(
        "not a JPEG or PNG image (starts with bytes {}; a JPEG starts with ff d8 ff, a PNG with 89 50 4e 47)",
        head));
  }
  const detail::JpegHeaderInfo info = detail::read_jpeg_header(bytes);
  header = {.format = ImageFormat::jpeg,
            .width = info.width,
            .height = info.height,
            .gpu_decodable = info.sequential_huffman_ycc};
  check_size("JPEG image", header.width, header.height, options);
  return header;
}

ScaleFactor choose_jpeg_scale(double region_width, double region_height, double need_width,
                              double need_height) {
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  ScaleFactor best;
  for (int i = 0; i < count; ++i) {
    ScaleFactor f{.num = factors[i].num, .denom = factors[i].denom};
    if (f.value() > 1.0 || f.value() >= best.value()) continue;
    if (region_width * f.value() >= need_width && region_height * f.value() >= need_height) best = f;
  }
  return best;
}

void decode_image(std::span<const uint8_t> bytes, const ImageHeader& header, ScaleFactor scale,
                  DecodedImage& out) {
  if (header.format == ImageFormat::png) {
    decode_png(bytes, out);
  } else {
    decode_jpeg(bytes, scale, out);
  }
}

void apply_corrupt_data_policy(const DecodedImage& image, const DecodeOptions& options) {
  if (!image.corrupt_data.empty() && options.corrupt_data == CorruptDataPolicy::error) {
    fail("corrupt JPEG data: " + image.corrupt_data + " (DecodeOptions::corrupt_data is error)");
  }
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  ImageHeader header = read_image_header(bytes, options);
  DecodedImage out;
  decode_image(bytes, header, ScaleFactor{}, out);
  apply_corrupt_data_policy(out, options);
  return out;
}

}  // namespace nabla::data
