// Internal (data/ only). Sequential reads over a file's bytes held in memory, raw or gzip. The
// gzip source inflates on demand, so a reader that stops at the length a header promised never
// inflates more than that (a "gzip bomb" costs nothing), and corrupt or truncated streams become
// DataErrors naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

struct z_stream_s;  // zlib's stream state, kept out of this header

namespace nabla::data {

class ByteSource {
 public:
  // Reads from raw bytes, or inflates them when they start with the gzip magic (1f 8b).
  ByteSource(std::span<const uint8_t> bytes, std::string name);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Reads up to `n` bytes into `dst`; fewer only at the end of the data.
  size_t read(uint8_t* dst, size_t n);
  bool compressed() const { return gzip_; }

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
  size_t offset_ = 0;
  bool gzip_ = false;
  bool stream_end_ = false;
  std::unique_ptr<z_stream_s> z_;
};

// The whole file, or a DataError naming it (missing, unreadable).
std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace nabla::data
