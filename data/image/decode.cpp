// JPEG (TurboJPEG) and PNG (libpng simplified API) decoding to RGB; see decode.h.
//
// One TurboJPEG handle per thread: handles are not thread-safe, and creating one per image costs
// more than decoding a small thumbnail. The handle lives until its thread exits.
#include "nabla/data/image/decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "nabla/core/error.h"

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

// Note [Fresh handle after an error]: in libjpeg-turbo 2.1, a tjDecompressHeader3 that fails
// leaves the handle's decompressor inside the header state, and the next file's header is then
// parsed on top of the old one ("Bogus Huffman table definition" on a valid progressive JPEG,
// found by tests/data/image_fuzz_test.cpp). So a handle that reported anything is replaced.
class TurboHandle {
 public:
  TurboHandle() { open(); }
  ~TurboHandle() { tjDestroy(handle_); }
  TurboHandle(const TurboHandle&) = delete;
  TurboHandle& operator=(const TurboHandle&) = delete;
  tjhandle get() const { return handle_; }
  void reset() {
    tjDestroy(handle_);
    handle_ = nullptr;
    open();
  }

 private:
  void open() {
    handle_ = tjInitDecompress();
    if (handle_ == nullptr)
      fail(std::string("cannot create a TurboJPEG decoder: ") + tjGetErrorStr2(nullptr));
  }
  tjhandle handle_ = nullptr;
};

TurboHandle& thread_decoder() {
  thread_local TurboHandle handle;
  return handle;
}

struct JpegInfo {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

JpegInfo jpeg_info(std::span<const uint8_t> bytes) {
  JpegInfo info;
  TurboHandle& handle = thread_decoder();
  if (tjDecompressHeader3(handle.get(), bytes.data(), static_cast<unsigned long>(bytes.size()), &info.width,
                          &info.height, &info.subsampling, &info.colorspace) != 0) {
    std::string message = tjGetErrorStr2(handle.get());
    handle.reset();  // Note [Fresh handle after an error]
    fail("corrupt JPEG header: " + message);
  }
  // libjpeg pads a file that ends inside the headers with a fake end marker and reports success
  // with no frame: say what happened rather than "0x0".
  if (info.width <= 0 || info.height <= 0) {
    handle.reset();
    fail("corrupt JPEG header: no frame header (the file is truncated?)");
  }
  return info;
}

void check_size(const char* kind, int64_t width, int64_t height, const DecodeOptions& options) {
  if (width <= 0 || height <= 0) fail(fmt::format("{} has an empty size {}x{}", kind, width, height));
  if (width * height > options.max_pixels) {
    fail(fmt::format("{} is {}x{} = {} pixels, above the limit of {} pixels (DecodeOptions::max_pixels)",
                     kind, width, height, width * height, options.max_pixels));
  }
}

// libjpeg reports a file cut short as a warning and fills the rest with gray. PIL refuses such
// files (LOAD_TRUNCATED_IMAGES is off), and so do we. Other warnings ("extraneous bytes before
// marker", seen in real ImageNet files) leave a complete image, which PIL also accepts.
bool is_truncation_warning(const std::string& message) {
  std::string lower = message;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("premature end") != std::string::npos;
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
  JpegInfo info = jpeg_info(bytes);
  out.scale = scale;
  out.width = scale.scaled(info.width);
  out.height = scale.scaled(info.height);
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  bool cmyk = info.colorspace == TJCS_CMYK || info.colorspace == TJCS_YCCK;
  thread_local std::vector<uint8_t> cmyk_buffer;
  uint8_t* target = out.pixels.data();
  if (cmyk) {
    cmyk_buffer.resize(static_cast<size_t>(out.width) * out.height * 4);
    target = cmyk_buffer.data();
  }
  TurboHandle& handle = thread_decoder();
  // Grayscale JPEGs decode straight to RGB (libjpeg replicates the channel).
  int status = tjDecompress2(handle.get(), bytes.data(), static_cast<unsigned long>(bytes.size()), target,
                             out.width, 0, out.height, cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_LIMITSCANS);
  if (status != 0) {
    std::string message = tjGetErrorStr2(handle.get());
    bool fatal = tjGetErrorCode(handle.get()) == TJERR_FATAL;
    handle.reset();  // Note [Fresh handle after an error]
    if (fatal) fail("corrupt JPEG data: " + message);
    if (is_truncation_warning(message)) fail("truncated JPEG: " + message);
  }
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
  JpegInfo info = jpeg_info(bytes);
  header = {.format = ImageFormat::jpeg, .width = info.width, .height = info.height};
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

DecodedImage decode_image(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  ImageHeader header = read_image_header(bytes, options);
  DecodedImage out;
  decode_image(bytes, header, ScaleFactor{}, out);
  return out;
}

}  // namespace nabla::data
