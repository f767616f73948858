// Internal to nabla::data (not installed). JPEG headers and pixels through libjpeg's own API.
//
// Note [JPEG warnings]: libjpeg reports damaged data as warnings and goes on, filling what it
// could not decode. TurboJPEG 2.1, which nabla used before, keeps only the last warning's text,
// reports a fatal error raised after a warning as one more warning, and fails a header read on
// any warning: a scan cut by a marker came back as "extraneous bytes before marker" (harmless,
// and accepted) or not at all, and a file with stray bytes between two header markers, which PIL
// reads, was rejected. Here every warning is seen by its code as it is raised:
//   - JWRN_JPEG_EOF, the file ends early: the decode fails as truncated (PIL refuses such files);
//   - damaged entropy-coded data (a bad Huffman code, a marker inside the scan, a lost
//     restart marker, a broken progression): counted, and the first one's text kept;
//   - anything else ("extraneous bytes before marker", which real ImageNet files raise, an unknown
//     JFIF revision, a bad ICC marker): the image is whole, and it is accepted.
// libjpeg-turbo itself only sees some damage: its fast Huffman path, used away from the end of
// the data, decodes a bad code as zero without a word, so such a file decodes to garbage that
// no warning reports (PIL, on the same library, is just as blind to it).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace nabla::data::detail {

struct JpegHeaderInfo {
  int width = 0, height = 0;
  bool cmyk = false;  // Adobe CMYK or YCCK: decoded to inverted CMYK, converted by the caller
  // Sequential (not progressive), Huffman-coded (not arithmetic), 8-bit, YCbCr or grayscale: the
  // JPEGs GPU decoders take (nvJPEG's hardware engine decodes only these).
  bool sequential_huffman_ycc = false;
};

// Reads the headers up to the first scan. Throws nabla::Error "corrupt JPEG header: ..." when
// libjpeg fails there or the file ends inside them.
JpegHeaderInfo read_jpeg_header(std::span<const uint8_t> bytes);

struct JpegPixelsRequest {
  int scale_num = 1, scale_denom = 1;
  bool cmyk = false;       // decode to (inverted) CMYK, 4 bytes a pixel, instead of RGB
  uint8_t* out = nullptr;  // (height, width, 3 or 4) at the scaled size
  int width = 0, height = 0;
};

struct JpegPixelsResult {
  int corrupt_warnings = 0;   // warnings about damaged entropy-coded data
  std::string first_corrupt;  // the text of the first of them
};

// Decodes `bytes` (whose header was already read) into request.out. Throws nabla::Error, with
// "corrupt JPEG data: ..." or "truncated JPEG: ...", when libjpeg fails or the file ends early.
JpegPixelsResult decode_jpeg_pixels(std::span<const uint8_t> bytes, const JpegPixelsRequest& request);

}  // namespace nabla::data::detail
