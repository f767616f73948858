// ByteSource and read_file_bytes (see byte_source.h).
#include "nabla/data/detail/byte_source.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "nabla/data/error.h"

namespace nabla::data {

ByteSource::ByteSource(std::span<const uint8_t> bytes, std::string name)
    : bytes_(bytes), name_(std::move(name)) {
  gzip_ = bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
  if (!gzip_) return;
  z_ = std::make_unique<z_stream_s>();
  z_->next_in = const_cast<Bytef*>(bytes.data());  // zlib's API is not const-correct; it only reads
  z_->avail_in = static_cast<uInt>(std::min<size_t>(bytes.size(), UINT32_MAX));
  offset_ = z_->avail_in;
  // 16 + MAX_WBITS: expect a gzip header and trailer (and check the CRC).
  if (inflateInit2(z_.get(), 16 + MAX_WBITS) != Z_OK) {
    z_.reset();
    throw DataError(-1, name_, "zlib could not start inflating (out of memory?)");
  }
}

ByteSource::~ByteSource() {
  if (z_) inflateEnd(z_.get());
}

size_t ByteSource::read(uint8_t* dst, size_t n) {
  if (!gzip_) {
    size_t take = std::min(n, bytes_.size() - offset_);
    if (take > 0) std::memcpy(dst, bytes_.data() + offset_, take);
    offset_ += take;
    return take;
  }
  size_t produced = 0;
  while (produced < n && !stream_end_) {
    if (z_->avail_in == 0 && offset_ < bytes_.size()) {  // inputs past 4 GiB arrive in pieces
      z_->next_in = const_cast<Bytef*>(bytes_.data() + offset_);
      z_->avail_in = static_cast<uInt>(std::min<size_t>(bytes_.size() - offset_, UINT32_MAX));
      offset_ += z_->avail_in;
    }
    size_t want = std::min<size_t>(n - produced, UINT32_MAX);
    z_->next_out = dst + produced;
    z_->avail_out = static_cast<uInt>(want);
    int status = inflate(z_.get(), Z_NO_FLUSH);
    size_t made = want - z_->avail_out;
    produced += made;
    if (status == Z_STREAM_END) {
      stream_end_ = true;
    } else if (status == Z_BUF_ERROR ||
               (status == Z_OK && made == 0 && z_->avail_in == 0 && offset_ >= bytes_.size())) {
      // No progress possible: the input ran out before the end of the stream.
      throw DataError(-1, name_, "truncated gzip data (the compressed stream ends early)");
    } else if (status != Z_OK) {
      throw DataError(
          -1, name_,
          std::string("corrupt gzip data: ") + (z_->msg ? z_->msg : "zlib error " + std::to_string(status)));
    }
  }
  return produced;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw DataError(-1, path, std::string("cannot open the file: ") + std::strerror(errno));
  auto size = static_cast<std::streamoff>(file.tellg());
  if (size < 0) throw DataError(-1, path, "cannot read the file's size (is it a directory?)");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  file.seekg(0);
  if (size > 0 && !file.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw DataError(-1, path, "read failed before the end of the file");
  }
  return bytes;
}

}  // namespace nabla::data
