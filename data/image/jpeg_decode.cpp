// JPEG pixels through libjpeg's API, with every warning classified; see
// Note [JPEG warnings] in detail/jpeg_decode.h.
//
// libjpeg reports errors through a callback that must not return, so it longjmps back to the
// one function below that called setjmp; that function and the libjpeg frames it calls hold no
// C++ objects with destructors. One decompressor per thread is reused (jpeg_abort between
// images): creating one per image costs more than decoding a small thumbnail.
#include "nabla/data/image/detail/jpeg_decode.h"

#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE
#include <vector>

#include <jerror.h>
#include <jpeglib.h>

#include "nabla/core/error.h"

namespace nabla::data::detail {
namespace {

// libjpeg-turbo's own bound (TurboJPEG's TJFLAG_LIMITSCANS): a crafted progressive file of
// thousands of tiny scans would otherwise keep the decoder busy for minutes.
constexpr int kMaxScans = 500;

struct Reporter {
  jpeg_error_mgr base;  // first member: libjpeg hands callbacks a pointer to it
  std::jmp_buf jump;
  char fatal[JMSG_LENGTH_MAX];
  char truncated[JMSG_LENGTH_MAX];
  char first_corrupt[JMSG_LENGTH_MAX];
  int corrupt_warnings;
};

Reporter& reporter_of(j_common_ptr info) {
  return *reinterpret_cast<Reporter*>(info->err);
}

bool is_corrupt_data(int code) {
  switch (code) {
    case JWRN_HUFF_BAD_CODE:
    case JWRN_HIT_MARKER:  // a marker inside the entropy-coded data
    case JWRN_MUST_RESYNC:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_NOT_SEQUENTIAL:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void on_error(j_common_ptr info) {
  Reporter& r = reporter_of(info);
  info->err->format_message(info, r.fatal);
  std::longjmp(r.jump, 1);
}

void on_message(j_common_ptr info, int level) {
  if (level >= 0) return;  // trace output, not a warning
  Reporter& r = reporter_of(info);
  info->err->num_warnings++;
  const int code = info->err->msg_code;
  if (code == JWRN_JPEG_EOF) {
    if (r.truncated[0] == '\0') info->err->format_message(info, r.truncated);
  } else if (is_corrupt_data(code)) {
    if (r.corrupt_warnings++ == 0) info->err->format_message(info, r.first_corrupt);
  }
}

void check_scans(j_common_ptr info) {
  if (!info->is_decompressor) return;
  if (reinterpret_cast<j_decompress_ptr>(info)->input_scan_number > kMaxScans) {
    Reporter& r = reporter_of(info);
    std::snprintf(r.fatal, sizeof r.fatal, "progressive JPEG with more than %d scans", kMaxScans);
    std::longjmp(r.jump, 1);
  }
}

class Decompressor {
 public:
  Decompressor() {
    info_.err = jpeg_std_error(&reporter_.base);
    reporter_.base.error_exit = on_error;
    reporter_.base.emit_message = on_message;
    progress_.progress_monitor = check_scans;
    create();
  }
  ~Decompressor() { jpeg_destroy_decompress(&info_); }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Each returns false when libjpeg raised an error (reporter().fatal says which); the object is
  // then fresh again.
  bool header(std::span<const uint8_t> bytes, JpegHeaderInfo& info) {
    reset_reports();
    return succeeded(read_header(bytes, info));
  }
  bool decode(std::span<const uint8_t> bytes, const JpegPixelsRequest& request, JSAMPROW* rows) {
    reset_reports();
    return succeeded(run(bytes, request, rows));
  }
  const Reporter& reporter() const { return reporter_; }

 private:
  void reset_reports() {
    reporter_.fatal[0] = reporter_.truncated[0] = reporter_.first_corrupt[0] = '\0';
    reporter_.corrupt_warnings = 0;
    reporter_.base.num_warnings = 0;
  }
  // Note [Fresh handle after an error]: a decompressor that failed part-way is rebuilt rather
  // than trusted. TurboJPEG 2.1 left a failed header read's state behind, and the next file's
  // header was parsed on top of it ("Bogus Huffman table definition" on a valid progressive
  // JPEG, found by tests/data/image_fuzz_test.cpp).
  bool succeeded(bool ok) {
    if (!ok) {
      jpeg_destroy_decompress(&info_);
      create();
    }
    return ok;
  }

  bool read_header(std::span<const uint8_t> bytes, JpegHeaderInfo& out) {
    jpeg_decompress_struct* d = &info_;
    if (setjmp(reporter_.jump) != 0) return false;
    jpeg_mem_src(d, bytes.data(), static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(d, TRUE);
    out.width = static_cast<int>(d->image_width);
    out.height = static_cast<int>(d->image_height);
    out.cmyk = d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK;
    const bool ycc = (d->jpeg_color_space == JCS_YCbCr && d->num_components == 3) ||
                     (d->jpeg_color_space == JCS_GRAYSCALE && d->num_components == 1);
    out.sequential_huffman_ycc = !d->progressive_mode && !d->arith_code && d->data_precision == 8 && ycc;
    jpeg_abort_decompress(d);
    return true;
  }

  void create() {
    if (setjmp(reporter_.jump) != 0)
      throw nabla::Error(std::string("cannot create a JPEG decoder: ") + reporter_.fatal);
    jpeg_create_decompress(&info_);
  }

  bool run(std::span<const uint8_t> bytes, const JpegPixelsRequest& request, JSAMPROW* rows) {
    jpeg_decompress_struct* d = &info_;
    if (setjmp(reporter_.jump) != 0) return false;
    jpeg_mem_src(d, bytes.data(), static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(d, TRUE);
    d->scale_num = static_cast<unsigned>(request.scale_num);
    d->scale_denom = static_cast<unsigned>(request.scale_denom);
    d->out_color_space = request.cmyk ? JCS_CMYK : JCS_RGB;
    d->progress = &progress_;
    jpeg_start_decompress(d);
    if (static_cast<int>(d->output_width) != request.width ||
        static_cast<int>(d->output_height) != request.height ||
        d->output_components != (request.cmyk ? 4 : 3)) {
      std::snprintf(reporter_.fatal, sizeof reporter_.fatal, "decoded size %ux%ux%d, expected %dx%dx%d",
                    d->output_width, d->output_height, d->output_components, request.width, request.height,
                    request.cmyk ? 4 : 3);
      return false;
    }
    while (d->output_scanline < d->output_height) {
      jpeg_read_scanlines(d, rows + d->output_scanline, d->output_height - d->output_scanline);
    }
    jpeg_finish_decompress(d);
    return true;
  }

  jpeg_decompress_struct info_{};
  Reporter reporter_{};
  jpeg_progress_mgr progress_{};
};

Decompressor& thread_decompressor() {
  thread_local Decompressor decompressor;
  return decompressor;
}

}  // namespace

JpegHeaderInfo read_jpeg_header(std::span<const uint8_t> bytes) {
  Decompressor& decompressor = thread_decompressor();
  JpegHeaderInfo info;
  const bool ok = decompressor.header(bytes, info);
  const Reporter& r = decompressor.reporter();
  // libjpeg pads a file that ends inside the headers with a fake end marker, then finds no image.
  if (r.truncated[0] != '\0')
    throw nabla::Error("corrupt JPEG header: the file ends inside the headers (truncated?)");
  if (!ok) throw nabla::Error(std::string("corrupt JPEG header: ") + r.fatal);
  if (info.width <= 0 || info.height <= 0) throw nabla::Error("corrupt JPEG header: no frame header");
  return info;
}

JpegPixelsResult decode_jpeg_pixels(std::span<const uint8_t> bytes, const JpegPixelsRequest& request) {
  NABLA_ASSERT(request.out != nullptr && request.width > 0 && request.height > 0, "bad JPEG pixel request");
  Decompressor& decompressor = thread_decompressor();
  thread_local std::vector<JSAMPROW> rows;
  const size_t row_bytes = static_cast<size_t>(request.width) * (request.cmyk ? 4 : 3);
  rows.resize(static_cast<size_t>(request.height));
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = request.out + y * row_bytes;

  const bool ok = decompressor.decode(bytes, request, rows.data());
  const Reporter& r = decompressor.reporter();
  // A file cut short reads as truncated whatever else went wrong after its end.
  if (r.truncated[0] != '\0') throw nabla::Error(std::string("truncated JPEG: ") + r.truncated);
  if (!ok) throw nabla::Error(std::string("corrupt JPEG data: ") + r.fatal);
  return {.corrupt_warnings = r.corrupt_warnings, .first_corrupt = r.first_corrupt};
}

}  // namespace nabla::data::detail
